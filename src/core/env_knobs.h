// The KILN_* environment variables, each declared once: its name, the values it takes, its
// default and what it does (NCCL's NCCL_PARAM idea). `kiln env` lists them, docs/cli.md
// documents them, and the kiln command (and kilnInit) warn, one line each, about a KILN_*
// variable that is not one of them or whose value is not one it takes, instead of
// silently ignoring it.
//
// The code that reads a variable still calls getenv where it needs it (read once, cached
// there); a variable whose reader already reports a bad value itself is marked so, and is
// not warned about twice.
#pragma once

#include <string>
#include <vector>

namespace kiln {

struct EnvKnob {
  const char* name;           // "KILN_LOG_LEVEL"
  const char* values;         // the values it takes, as the warning and the docs say them
  const char* default_value;  // what applies when it is unset
  const char* doc;            // what it does, one sentence
  // True if `value` (non-empty) is one the variable takes; null: any value.
  bool (*valid)(const char* value);
  // The reader reports a bad value itself (an error or its own warning).
  bool checked_where_read = false;
};

// Every knob, in the order docs/cli.md lists them.
const std::vector<EnvKnob>& env_knobs();

// The knob named `name`, or null.
const EnvKnob* find_env_knob(const std::string& name);

// One line per problem with the current environment: a KILN_* variable that is no knob
// ("KILN_NUM_THREAD is not a Kiln variable; did you mean KILN_NUM_THREADS?") or a value a
// knob does not take ("KILN_LOG_LEVEL='verbose' is not valid: it takes error, warning, ...
// (default: warning)").
std::vector<std::string> environment_warnings();

// Prints environment_warnings() to stderr once per process, each prefixed by `who`
// ("kiln run", "kiln"). Later calls do nothing.
void warn_about_environment(const char* who);

}  // namespace kiln
