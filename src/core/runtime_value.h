// RuntimeValue: what flows along a graph edge at run time. ONNX values are tensors,
// sequences of tensors, or optionals of either; an empty optional (and an omitted input)
// is kNone, a present optional is just its content, so kernels see three kinds only.
// Sequences are immutable once built and shared by pointer: copying a RuntimeValue never
// copies elements.
#pragma once

#include <memory>
#include <vector>

#include "core/tensor.h"

namespace kiln {

class RuntimeValue {
 public:
  enum class Kind { kNone, kTensor, kSequence };

  RuntimeValue() = default;                                  // an empty optional
  RuntimeValue(Tensor t) : kind_(Kind::kTensor), tensor_(std::move(t)) {}  // NOLINT: implicit by design
  static RuntimeValue sequence(DataType elem_type, std::vector<Tensor> items) {
    RuntimeValue v;
    v.kind_ = Kind::kSequence;
    v.seq_ = std::make_shared<const Sequence>(Sequence{elem_type, std::move(items)});
    return v;
  }

  Kind kind() const { return kind_; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_tensor() const { return kind_ == Kind::kTensor; }
  bool is_sequence() const { return kind_ == Kind::kSequence; }

  // Requires is_tensor() (an undefined Tensor otherwise).
  const Tensor& tensor() const { return tensor_; }
  Tensor& tensor() { return tensor_; }
  // Requires is_sequence().
  const std::vector<Tensor>& items() const { return seq_->items; }
  DataType sequence_dtype() const { return seq_ ? seq_->elem_type : DataType::kUndefined; }

  // "float32[2,3]", "seq<float32>[4 items]", "none"
  std::string description() const;

 private:
  struct Sequence {
    DataType elem_type;
    std::vector<Tensor> items;
  };
  Kind kind_ = Kind::kNone;
  Tensor tensor_;
  std::shared_ptr<const Sequence> seq_;
};

inline std::string RuntimeValue::description() const {
  switch (kind_) {
    case Kind::kNone: return "none";
    case Kind::kTensor: return tensor_.description();
    case Kind::kSequence:
      return "seq<" + std::string(dtype_name(seq_->elem_type)) + ">[" + std::to_string(seq_->items.size()) + " items]";
  }
  return "?";
}

}  // namespace kiln
