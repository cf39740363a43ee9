// The .kiln writer out of disk space: a write that fails part way (here RLIMIT_FSIZE, as a
// full disk, so that no file system needs filling) is an error naming the file and the
// offset, leaves neither the file nor its temporary behind, keeps an older file of that name
// whole, and the same process writes the model once space is back.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../file_size_limit.h"
#include "model/kiln_model.h"
#include "model_test_util.h"

namespace kiln::model {
namespace {

// A model of about 64 KB of weights, in `g`.
void build_weighty_graph(ir::Graph& g) {
  ir::Value* x = *g.add_value("x");
  x->type().dtype = DataType::kFloat32;
  x->type().shape = Shape{16384};
  ir::Value* w = *g.add_value("w");
  w->type().dtype = DataType::kFloat32;
  w->type().shape = Shape{16384};
  w->set_initializer(Tensor::from_vector<float>(std::vector<float>(16384, 0.25f)));
  ir::Value* y = *g.add_value("y");
  y->type().dtype = DataType::kFloat32;
  y->type().shape = Shape{16384};
  g.inputs() = {x};
  g.add_node("add", "Add", "", 17, {x, w}, {y});
  g.outputs() = {y};
  g.opset_imports()[""] = 17;
}

TEST(ModelWriteExhaustionTest, FullDiskLeavesNothingHalfWrittenAndTheWriterRecovers) {
  namespace fs = std::filesystem;
  const std::string path = test_util::temp_dir() + "/full_disk.kiln";
  ir::Graph g("main");
  build_weighty_graph(g);
  ModelInfo info;
  info.kiln_version = "0.1.0";
  info.target_arch = "x86_64";
  // An older model of that name, which a failed write must leave as it was.
  const std::vector<uint8_t> old_bytes(100, 7);
  test_util::write_bytes(path, old_bytes);

  Status s;
  {
    test::FileSizeLimit full_disk(16384);  // the "disk" fills a quarter into the weights
    ASSERT_TRUE(full_disk.ok());
    s = write_model(g, info, path);
  }
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
  EXPECT_NE(s.message().find("full_disk.kiln.tmp"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("File too large"), std::string::npos) << s.to_string();
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(test_util::read_bytes(path), old_bytes);

  // Space is back: the same process writes the model, and it loads.
  ASSERT_TRUE(write_model(g, info, path).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  Expected<LoadedModel> loaded = load_model(path);
  EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
}

}  // namespace
}  // namespace kiln::model
