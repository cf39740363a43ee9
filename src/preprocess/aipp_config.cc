// AIPP configuration file -> ops::AippInsertion, with protobuf's TextFormat parser.
#include "preprocess/aipp_config.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "aipp.pb.h"

namespace kiln::preprocess {
namespace {

namespace pb = google::protobuf;
using Params = kiln::aipp::AippOpParams;

// Keeps the first error protobuf reports, with its position (1-based in the message).
class FirstError final : public pb::io::ErrorCollector {
 public:
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    if (message_.empty()) message_ = std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " + message;
  }
  void AddWarning(int, pb::io::ColumnNumber, const std::string&) override {}
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

// protobuf says `Message type "kiln.aipp.AippOpParams" has no field named "x".`; say it
// in the file's own terms.
std::string plain_message(std::string m) {
  const std::string from = "Message type \"kiln.aipp.AippOpParams\" has no field named ";
  if (size_t at = m.find(from); at != std::string::npos) m.replace(at, from.size(), "aipp_op has no field named ");
  const std::string from2 = "Message type \"kiln.aipp.InsertNewOps\" has no field named ";
  if (size_t at = m.find(from2); at != std::string::npos)
    m.replace(at, from2.size(), "the file holds aipp_op blocks only; no field named ");
  return m;
}

Expected<ops::AippInsertion> convert(const Params& m, const pb::TextFormat::ParseInfoTree* tree, const std::string& name,
                                     int block_line) {
  ops::AippInsertion ins;
  ins.where = name + ":" + std::to_string(block_line);
  // The line of every field set, for errors found here and by the compiler.
  const pb::Descriptor* d = Params::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    pb::TextFormat::ParseLocation loc = tree ? tree->GetLocation(d->field(i), -1) : pb::TextFormat::ParseLocation();
    if (loc.line >= 0) ins.field_lines.emplace_back(d->field(i)->name(), loc.line + 1);
  }
  auto fail = [&](const std::string& msg) -> Status { return invalid_argument("%s", ins.locate(msg).c_str()); };

  if (m.aipp_mode() == Params::undefined) return fail("aipp_mode is required: static or dynamic");
  ins.dynamic = m.aipp_mode() == Params::dynamic;
  ins.input_index = m.has_related_input_rank() ? m.related_input_rank() : 0;
  if (ins.dynamic) {
    if (!m.has_max_src_image_size() || m.max_src_image_size() == 0)
      return fail("max_src_image_size is required with aipp_mode dynamic (bytes of the largest raw image)");
    ins.max_src_image_size = m.max_src_image_size();
    // Everything else comes at run time (kilnmdlSetInputAIPP): a field set here would be
    // silently ignored.
    for (const auto& [field, line] : ins.field_lines)
      if (field != "aipp_mode" && field != "related_input_rank" && field != "max_src_image_size")
        return fail(field + " is set at run time with aipp_mode dynamic (kilnmdlSetAIPP*); the file takes "
                            "related_input_rank and max_src_image_size only");
    return ins;
  }
  if (m.has_max_src_image_size()) return fail("max_src_image_size is for aipp_mode dynamic only");

  ops::AippParams& p = ins.params;
  p.format = static_cast<ops::AippFormat>(m.input_format());
  if (p.format == ops::AippFormat::kUndefined) return fail("input_format is required with aipp_mode static");
  if (!ops::aipp_format_known(p.format))
    return fail("input_format " + Params::InputFormat_Name(m.input_format()) + " is not one Kiln's AIPP takes");
  p.src_w = m.src_image_size_w();
  p.src_h = m.src_image_size_h();
  if (p.src_w < 0 || p.src_h < 0) return fail("src_image_size_w/h must not be negative");
  p.rbuv_swap = m.rbuv_swap_switch();
  p.ax_swap = m.ax_swap_switch();
  if (p.ax_swap && ops::aipp_format_channels(p.format) != 4)
    return fail(std::string("ax_swap_switch: ") + ops::aipp_format_name(p.format) + " has no alpha/X byte");

  const bool any_matrix = m.has_matrix_r0c0() || m.has_matrix_r0c1() || m.has_matrix_r0c2() || m.has_matrix_r1c0() ||
                          m.has_matrix_r1c1() || m.has_matrix_r1c2() || m.has_matrix_r2c0() || m.has_matrix_r2c1() ||
                          m.has_matrix_r2c2();
  if (m.csc_switch()) {
    if (any_matrix && m.csc_preset() != Params::NONE) return fail("csc_preset and matrix_r*c*: give one of them");
    if (any_matrix) {
      const int32_t mat[9] = {m.matrix_r0c0(), m.matrix_r0c1(), m.matrix_r0c2(), m.matrix_r1c0(), m.matrix_r1c1(),
                              m.matrix_r1c2(), m.matrix_r2c0(), m.matrix_r2c1(), m.matrix_r2c2()};
      for (int i = 0; i < 9; ++i) p.matrix[i / 3][i % 3] = static_cast<float>(mat[i]);
      p.input_bias[0] = m.input_bias_0(), p.input_bias[1] = m.input_bias_1(), p.input_bias[2] = m.input_bias_2();
      p.output_bias[0] = m.output_bias_0(), p.output_bias[1] = m.output_bias_1(), p.output_bias[2] = m.output_bias_2();
      p.csc = true;
      if (m.csc_output_bgr()) return fail("csc_output_bgr applies to csc_preset; write the matrix rows in B, G, R order");
    } else {
      // No matrix: a preset, BT.601 narrow range (what H.264/H.265 decoders output) by default.
      const auto preset = m.csc_preset() == Params::NONE ? ops::CscPreset::kBt601Narrow
                                                          : static_cast<ops::CscPreset>(m.csc_preset());
      if (!ops::aipp_format_is_yuv(p.format))
        return fail(std::string("csc_preset converts YUV to RGB; input_format ") + ops::aipp_format_name(p.format) +
                    " is not YUV (give matrix_r*c* for other conversions)");
      ops::apply_csc_preset(p, preset, m.csc_output_bgr());
    }
  } else if (any_matrix || m.csc_preset() != Params::NONE || m.has_csc_output_bgr()) {
    return fail("matrix_r*c* / csc_preset / csc_output_bgr are set but csc_switch is not true");
  }

  ops::AippBatchParams& b = p.batch[0];
  b.crop = m.crop();
  if (!b.crop && (m.has_load_start_pos_w() || m.has_load_start_pos_h() || m.has_crop_size_w() || m.has_crop_size_h()))
    return fail("load_start_pos_w/h and crop_size_w/h are set but crop is not true");
  b.crop_x = m.load_start_pos_w(), b.crop_y = m.load_start_pos_h();
  b.crop_w = m.crop_size_w(), b.crop_h = m.crop_size_h();
  b.resize = m.resize();
  if (!b.resize && (m.has_resize_output_w() || m.has_resize_output_h()))
    return fail("resize_output_w/h are set but resize is not true");
  if (b.resize && (m.resize_output_w() <= 0 || m.resize_output_h() <= 0))
    return fail("resize_output_w/h must be positive, got " + std::to_string(m.resize_output_w()) + "x" +
                std::to_string(m.resize_output_h()));
  b.resize_w = m.resize_output_w(), b.resize_h = m.resize_output_h();
  b.padding = m.padding();
  if (!b.padding && (m.has_left_padding_size() || m.has_right_padding_size() || m.has_top_padding_size() ||
                     m.has_bottom_padding_size() || m.has_padding_value()))
    return fail("*_padding_size / padding_value are set but padding is not true");
  b.pad_left = m.left_padding_size(), b.pad_right = m.right_padding_size();
  b.pad_top = m.top_padding_size(), b.pad_bottom = m.bottom_padding_size();
  b.padding_value = m.padding_value();
  const float mean[4] = {m.mean_chn_0(), m.mean_chn_1(), m.mean_chn_2(), m.mean_chn_3()};
  const float mn[4] = {m.min_chn_0(), m.min_chn_1(), m.min_chn_2(), m.min_chn_3()};
  const bool has_var[4] = {m.has_var_reci_chn_0(), m.has_var_reci_chn_1(), m.has_var_reci_chn_2(), m.has_var_reci_chn_3()};
  const float var[4] = {m.var_reci_chn_0(), m.var_reci_chn_1(), m.var_reci_chn_2(), m.var_reci_chn_3()};
  for (int c = 0; c < 4; ++c) {
    b.mean[c] = mean[c];
    b.min[c] = mn[c];
    b.var_reci[c] = has_var[c] ? var[c] : 1.0f;
  }
  return ins;
}

}  // namespace

Expected<std::vector<ops::AippInsertion>> parse_aipp_config(const std::string& text, const std::string& name) {
  kiln::aipp::InsertNewOps file;
  pb::TextFormat::Parser parser;
  FirstError errors;
  pb::TextFormat::ParseInfoTree tree;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(&tree);
  bool parsed = false;
  try {
    parsed = parser.ParseFromString(text, &file);
  } catch (const std::exception& e) {
    return invalid_argument("%s: %s", name.c_str(), e.what());
  }
  if (!parsed)
    return invalid_argument("%s:%s", name.c_str(),
                            plain_message(errors.message().empty() ? std::string(" not an AIPP configuration")
                                                                   : errors.message())
                                .c_str());
  if (file.aipp_op_size() == 0) return invalid_argument("%s: no aipp_op { ... } block", name.c_str());
  const pb::FieldDescriptor* op_field = kiln::aipp::InsertNewOps::descriptor()->FindFieldByName("aipp_op");
  std::vector<ops::AippInsertion> out;
  std::set<int64_t> inputs;
  for (int i = 0; i < file.aipp_op_size(); ++i) {
    const int line = tree.GetLocation(op_field, i).line + 1;
    KILN_ASSIGN_OR_RETURN(ops::AippInsertion ins, convert(file.aipp_op(i), tree.GetTreeForNested(op_field, i), name, line));
    if (!inputs.insert(ins.input_index).second)
      return invalid_argument("%s: two aipp_op blocks for related_input_rank %lld",
                              ins.locate("related_input_rank").c_str(), (long long)ins.input_index);
    out.push_back(std::move(ins));
  }
  return out;
}

Expected<std::vector<ops::AippInsertion>> read_aipp_config(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return invalid_argument("%s: is a directory, not an AIPP configuration", path.c_str());
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("%s: cannot open the AIPP configuration", path.c_str());
  std::ostringstream ss;
  ss << f.rdbuf();
  if (ss.str().size() > (1u << 20)) return invalid_argument("%s: over 1 MiB, not an AIPP configuration", path.c_str());
  return parse_aipp_config(ss.str(), std::filesystem::path(path).filename().string());
}

}  // namespace kiln::preprocess
