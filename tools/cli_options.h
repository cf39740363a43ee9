// Options several subcommands share (run, bench, profile, compare), declared once so that
// they are spelled, documented and checked the same way everywhere (docs/cli.md).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace kiln::tools {

// --input-shape on a command that runs a model.
CLI::Option* add_input_shape_option(CLI::App& app, std::string* spec);

// --input NAME=FILE.npy items: a usage error (message) if one is not of that form, "" if all are.
std::string check_input_specs(const std::vector<std::string>& specs);

// An option naming a file to write (`kiln compile -o`, `--report`, `compare --json`) that is a
// directory, or one naming a directory to write (`run --output-dir`, `profile --output`) that
// is a file: the message naming it, "" if the path is fine (or does not exist yet).
std::string check_output_file(const char* option, const std::string& path);
std::string check_output_dir(const char* option, const std::string& path);

// --threads N: usage error (message in *error) unless N >= 1 when given; above the cores a
// device has (the process's cores split over `devices`, 0 meaning KILN_DEVICES or 1) it is
// capped to them with a one-line warning, since more threads than cores only contend.
// Returns the count to use, 0 when not given.
int checked_threads(const std::string& command, const CLI::Option* option, int threads, int devices,
                    std::string* error);

// Undoes the spelling differences between ATC's options and Kiln's: "--input_shape" is
// "--input-shape" (every Kiln option takes either). Applied to argv before parsing; the
// value after '=' and every argument not starting with "--" are left alone.
void normalize_option_spelling(int argc, char** argv);

}  // namespace kiln::tools
