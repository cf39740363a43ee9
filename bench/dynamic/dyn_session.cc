// Kiln side of bench/dynamic_shapes.sh (issue 24): one long-lived process holding several
// models at once (a model compiled with open dims and the same model compiled at fixed
// shapes) and several input sets, driven over a pipe by bench/dynamic/driver.py, so that the
// driver can alternate dynamic, static and ONNX Runtime runs of the same shape, and run a
// mixed-shape loop on one dynamic model, all warm. Public C API only (include/kiln/kiln.h):
// an input whose model dims are open gets its actual shape with kilnmdlSetDatasetTensorDesc,
// as an application would give it.
//
// Usage: dyn_session THREADS
//
// Prints {"ready": true} once the runtime is up, then answers one JSON line per command read
// from stdin ({"error": "..."} and exit status 1 on a failure):
//   load ID FILE.kiln        loads a model: {"loaded", "load_ms", "inputs", "outputs", "open"}
//   unload ID                unloads it (and drops its buffers)
//   feed KEY NAME=FILE.npy.. an input set (float32/int64/int32/uint8/bool .npy): {"fed": KEY}
//   time ID KEY K W          W untimed then K timed runs of model ID on input set KEY:
//                            {"times_ms": [...]} (kilnmdlExecuteAsync + kilnrtSynchronizeStream)
//   seq ID:KEY ID:KEY ...    runs the steps back to back, each timed: {"times_ms": [...]}
//   save ID KEY DIR          one run; DIR/<output>.npy and DIR/outputs.json, in the layout of
//                            `kiln run --output-dir`: {"saved": DIR}
//   mem                      {"rss_kb", "hwm_kb", "dev_in_use", "dev_peak", "dev_cached"}
//   quit                     exits
// The device buffers of a (model, input set) pair are made on its first run and kept: the
// inputs copied in once, outputs whose size the model does not fix sized by growing them until
// an execution accepts them (untimed).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/kiln.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

void reply(const std::string& json) {
  std::fputs(json.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

// `call` is the call's text; its function name (up to the '(') names it.
[[noreturn]] void fail_api(const std::string& call, kilnError e) {
  throw Failure(call.substr(0, call.find('(')) + " failed (" + std::to_string(e) + "): " + kilnGetRecentErrMsg());
}

#define CHECK(call)                                  \
  do {                                               \
    kilnError e_ = (call);                           \
    if (e_ != KILN_SUCCESS) fail_api(#call, e_);     \
  } while (0)

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::string dims_json(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

// ---- .npy ------------------------------------------------------------------------------------

struct HostTensor {
  kilnDataType dtype = KILN_DT_UNDEFINED;
  std::string descr;
  std::vector<int64_t> dims;
  std::vector<char> data;
};

struct DescrType {
  const char* descr;
  kilnDataType dtype;
};
constexpr DescrType kDescrs[] = {{"<f4", KILN_FLOAT},  {"<i8", KILN_INT64}, {"<i4", KILN_INT32},
                                 {"|u1", KILN_UINT8},  {"|i1", KILN_INT8},  {"|b1", KILN_BOOL},
                                 {"<f8", KILN_DOUBLE}, {"<f2", KILN_FLOAT16}};

HostTensor read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Failure("cannot open '" + path + "'");
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    throw Failure("'" + path + "' is not a .npy file");
  uint32_t header_len = 0;
  if (magic[6] == 1) {
    unsigned char b[2];
    f.read(reinterpret_cast<char*>(b), 2);
    header_len = b[0] | (b[1] << 8);
  } else {
    unsigned char b[4];
    f.read(reinterpret_cast<char*>(b), 4);
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (uint32_t{b[3]} << 24);
  }
  std::string header(header_len, '\0');
  if (!f.read(header.data(), header_len)) throw Failure("'" + path + "': truncated header");
  auto field = [&](const std::string& key) {
    size_t k = header.find("'" + key + "'");
    if (k == std::string::npos) throw Failure("'" + path + "': no " + key + " in the header");
    return header.substr(header.find(':', k) + 1);
  };
  HostTensor t;
  std::string d = field("descr");
  d = d.substr(d.find('\'') + 1);
  d = d.substr(0, d.find('\''));
  if (d.size() == 3 && (d[0] == '<' || d[0] == '=') && d[2] == '1') d[0] = '|';
  for (const DescrType& e : kDescrs)
    if (d == e.descr) t.dtype = e.dtype;
  if (t.dtype == KILN_DT_UNDEFINED) throw Failure("'" + path + "': unsupported dtype '" + d + "'");
  t.descr = d;
  std::string order = field("fortran_order");
  if (order.substr(order.find_first_not_of(' '), 4) == "True")
    throw Failure("'" + path + "': Fortran order is not supported");
  std::string shape = field("shape");
  shape = shape.substr(shape.find('(') + 1);
  shape = shape.substr(0, shape.find(')'));
  std::stringstream ss(shape);
  std::string item;
  size_t count = 1;
  while (std::getline(ss, item, ',')) {
    if (item.find_first_not_of(" ") == std::string::npos) continue;
    t.dims.push_back(std::stoll(item));
    count *= static_cast<size_t>(t.dims.back());
  }
  t.data.resize(count * kilnDataTypeSize(t.dtype));
  if (!t.data.empty() && !f.read(t.data.data(), static_cast<std::streamsize>(t.data.size())))
    throw Failure("'" + path + "': truncated data");
  return t;
}

const char* descr_of(kilnDataType t) {
  for (const DescrType& e : kDescrs)
    if (e.dtype == t) return e.descr;
  return nullptr;
}

void write_npy(const std::string& path, kilnDataType dtype, const std::vector<int64_t>& dims,
               const void* data, size_t bytes) {
  const char* descr = descr_of(dtype);
  if (!descr) throw Failure("output type " + std::to_string(dtype) + " cannot be written as .npy");
  std::string shape = "(";
  for (int64_t d : dims) shape += std::to_string(d) + ",";
  if (dims.size() > 1) shape.pop_back();
  shape += ")";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  unsigned char len[2] = {static_cast<unsigned char>(header.size() & 0xff),
                          static_cast<unsigned char>(header.size() >> 8)};
  f.write(reinterpret_cast<const char*>(len), 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!f) throw Failure("cannot write '" + path + "'");
}

std::string sanitize(const std::string& name) {
  std::string s = name;
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  return s;
}

// ---- Models and buffers ----------------------------------------------------------------------

struct IoSpec {
  std::string name;
  kilnDataType dtype = KILN_DT_UNDEFINED;
  std::vector<int64_t> dims;  // -1: open
  size_t bytes = 0;           // 0 when not fixed
  bool open() const {
    return std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 0; });
  }
};

struct Model {
  uint32_t id = 0;
  bool loaded = false;
  kilnmdlDesc* desc = nullptr;
  std::vector<IoSpec> inputs, outputs;
  ~Model() {
    if (desc) kilnmdlDestroyDesc(desc);
    if (loaded) kilnmdlUnload(id);
  }
};

// Device buffers and datasets of one (model, input set) pair.
struct Io {
  kilnmdlDataset* in = nullptr;
  kilnmdlDataset* out = nullptr;
  std::vector<kilnDataBuffer*> buffers;
  std::vector<void*> memory;
  std::vector<kilnTensorDesc*> descs;
  ~Io() {
    if (in) kilnmdlDestroyDataset(in);
    if (out) kilnmdlDestroyDataset(out);
    for (kilnDataBuffer* b : buffers) kilnDestroyDataBuffer(b);
    for (kilnTensorDesc* d : descs) kilnDestroyTensorDesc(d);
    for (void* p : memory) kilnrtFree(p);
  }
  void* add(kilnmdlDataset* dataset, size_t bytes) {
    void* p = nullptr;
    CHECK(kilnrtMalloc(&p, std::max<size_t>(bytes, 1), KILN_MEM_MALLOC_NORMAL_ONLY));
    memory.push_back(p);
    kilnDataBuffer* db = kilnCreateDataBuffer(p, std::max<size_t>(bytes, 1));
    if (!db) fail_api("kilnCreateDataBuffer", KILN_ERROR_BAD_ALLOC);
    buffers.push_back(db);
    CHECK(kilnmdlAddDatasetBuffer(dataset, db));
    return p;
  }
};

std::vector<IoSpec> describe(kilnmdlDesc* desc, bool inputs) {
  std::vector<IoSpec> specs;
  size_t n = inputs ? kilnmdlGetNumInputs(desc) : kilnmdlGetNumOutputs(desc);
  for (size_t i = 0; i < n; ++i) {
    IoSpec s;
    kilnmdlIODims d;
    CHECK(inputs ? kilnmdlGetInputDims(desc, i, &d) : kilnmdlGetOutputDims(desc, i, &d));
    s.name = d.name;
    s.dims.assign(d.dims, d.dims + d.dimCount);
    s.dtype = inputs ? kilnmdlGetInputDataType(desc, i) : kilnmdlGetOutputDataType(desc, i);
    s.bytes = inputs ? kilnmdlGetInputSizeByIndex(desc, i) : kilnmdlGetOutputSizeByIndex(desc, i);
    if (s.open()) s.bytes = 0;
    specs.push_back(std::move(s));
  }
  return specs;
}

std::string specs_json(const std::vector<IoSpec>& specs) {
  std::string s = "[";
  for (size_t i = 0; i < specs.size(); ++i) {
    if (i) s += ',';
    s += "{\"name\":\"";
    s += json_escape(specs[i].name);
    s += "\",\"dims\":";
    s += dims_json(specs[i].dims);
    s += '}';
  }
  return s + "]";
}

class Session {
 public:
  explicit Session(kilnrtStream stream) : stream_(stream) {}

  void load(const std::string& id, const std::string& path) {
    if (models_.count(id)) throw Failure("model '" + id + "' is already loaded");
    auto t = Clock::now();
    auto m = std::make_unique<Model>();
    uint32_t model_id = 0;
    CHECK(kilnmdlLoadFromFile(path.c_str(), &model_id));
    m->id = model_id;
    m->loaded = true;
    m->desc = kilnmdlCreateDesc();
    if (!m->desc) fail_api("kilnmdlCreateDesc", KILN_ERROR_BAD_ALLOC);
    CHECK(kilnmdlGetDesc(m->desc, m->id));
    m->inputs = describe(m->desc, true);
    m->outputs = describe(m->desc, false);
    bool open = std::any_of(m->inputs.begin(), m->inputs.end(), [](const IoSpec& s) { return s.open(); });
    double ms = ms_since(t);
    reply("{\"loaded\":\"" + json_escape(id) + "\",\"load_ms\":" + std::to_string(ms) +
          ",\"open\":" + (open ? "true" : "false") + ",\"inputs\":" + specs_json(m->inputs) +
          ",\"outputs\":" + specs_json(m->outputs) + "}");
    models_[id] = std::move(m);
  }

  void unload(const std::string& id) {
    for (auto it = io_.begin(); it != io_.end();)
      it = it->first.first == id ? io_.erase(it) : std::next(it);
    if (!models_.erase(id)) throw Failure("no model '" + id + "' is loaded");
    reply("{\"unloaded\":\"" + json_escape(id) + "\"}");
  }

  void feed(const std::string& key, const std::vector<std::string>& specs) {
    std::vector<std::pair<std::string, HostTensor>> set;
    for (const std::string& spec : specs) {
      size_t eq = spec.find('=');
      if (eq == std::string::npos || eq == 0) throw Failure("'" + spec + "' is not NAME=FILE.npy");
      set.emplace_back(spec.substr(0, eq), read_npy(spec.substr(eq + 1)));
    }
    for (auto it = io_.begin(); it != io_.end();)
      it = it->first.second == key ? io_.erase(it) : std::next(it);
    feeds_[key] = std::move(set);
    reply("{\"fed\":\"" + json_escape(key) + "\"}");
  }

  std::vector<double> time(const std::string& id, const std::string& key, int timed, int warmup) {
    Model& m = model(id);
    Io& io = buffers(id, key);
    std::vector<double> times;
    times.reserve(static_cast<size_t>(timed));
    for (int i = 0; i < warmup + timed; ++i) {
      double ms = execute(m, io);
      if (i >= warmup) times.push_back(ms);
    }
    return times;
  }

  std::vector<double> seq(const std::vector<std::pair<std::string, std::string>>& steps) {
    std::vector<std::pair<Model*, Io*>> plan;
    for (const auto& [id, key] : steps) plan.emplace_back(&model(id), &buffers(id, key));
    std::vector<double> times;
    times.reserve(plan.size());
    for (auto& [m, io] : plan) times.push_back(execute(*m, *io));
    return times;
  }

  void save(const std::string& id, const std::string& key, const std::string& dir) {
    Model& m = model(id);
    Io& io = buffers(id, key);
    execute(m, io);
    std::string index = "{";
    for (size_t i = 0; i < m.outputs.size(); ++i) {
      const kilnTensorDesc* d = kilnmdlGetDatasetTensorDesc(io.out, i);
      if (!d) fail_api("kilnmdlGetDatasetTensorDesc", KILN_ERROR_FAILURE);
      std::vector<int64_t> dims(kilnGetTensorDescNumDims(d));
      for (size_t k = 0; k < dims.size(); ++k) CHECK(kilnGetTensorDescDimV2(d, k, &dims[k]));
      kilnDataType dtype = kilnGetTensorDescType(d);
      size_t bytes = kilnGetTensorDescSize(d);
      kilnDataBuffer* db = kilnmdlGetDatasetBuffer(io.out, i);
      if (bytes > kilnGetDataBufferSizeV2(db)) throw Failure("output larger than its buffer");
      std::vector<char> host(bytes);
      if (bytes) CHECK(kilnrtMemcpy(host.data(), bytes, kilnGetDataBufferAddr(db), bytes, KILN_MEMCPY_DEVICE_TO_HOST));
      std::string file = sanitize(m.outputs[i].name) + ".npy";
      write_npy(dir + "/" + file, dtype, dims, host.data(), bytes);
      index += (i ? ",\"" : "\"") + json_escape(m.outputs[i].name) + "\":{\"file\":\"" + json_escape(file) +
               "\",\"shape\":" + dims_json(dims) + "}";
    }
    std::ofstream(dir + "/outputs.json") << index << "}\n";
    reply("{\"saved\":\"" + json_escape(dir) + "\"}");
  }

 private:
  Model& model(const std::string& id) {
    auto it = models_.find(id);
    if (it == models_.end()) throw Failure("no model '" + id + "' is loaded");
    return *it->second;
  }

  double execute(Model& m, Io& io) {
    auto t = Clock::now();
    kilnError e = kilnmdlExecuteAsync(m.id, io.in, io.out, stream_);
    if (e != KILN_SUCCESS) fail_api("kilnmdlExecuteAsync", e);
    e = kilnrtSynchronizeStream(stream_);
    if (e != KILN_SUCCESS) fail_api("kilnrtSynchronizeStream after an execution", e);
    return ms_since(t);
  }

  std::unique_ptr<Io> make_io(Model& m, const std::vector<std::pair<std::string, HostTensor>>& set,
                              const std::vector<size_t>& out_bytes) {
    auto io = std::make_unique<Io>();
    io->in = kilnmdlCreateDataset();
    io->out = kilnmdlCreateDataset();
    if (!io->in || !io->out) fail_api("kilnmdlCreateDataset", KILN_ERROR_BAD_ALLOC);
    for (size_t i = 0; i < m.inputs.size(); ++i) {
      const IoSpec& s = m.inputs[i];
      auto it = std::find_if(set.begin(), set.end(), [&](const auto& p) { return p.first == s.name; });
      if (it == set.end()) throw Failure("the input set has no tensor for input '" + s.name + "'");
      const HostTensor& t = it->second;
      if (t.dtype != s.dtype)
        throw Failure("input '" + s.name + "': .npy type " + t.descr + " does not match the model's (" +
                      std::to_string(s.dtype) + ")");
      if (t.dims.size() != s.dims.size())
        throw Failure("input '" + s.name + "': rank " + std::to_string(t.dims.size()) + ", the model's " +
                      dims_json(s.dims));
      for (size_t k = 0; k < t.dims.size(); ++k)
        if (s.dims[k] >= 0 && s.dims[k] != t.dims[k])
          throw Failure("input '" + s.name + "': shape " + dims_json(t.dims) + ", the model's " + dims_json(s.dims));
      void* p = io->add(io->in, t.data.size());
      if (!t.data.empty())
        CHECK(kilnrtMemcpy(p, t.data.size(), t.data.data(), t.data.size(), KILN_MEMCPY_HOST_TO_DEVICE));
      if (s.open()) {
        kilnTensorDesc* d = kilnCreateTensorDesc(s.dtype, static_cast<int>(t.dims.size()), t.dims.data(), KILN_FORMAT_ND);
        if (!d) fail_api("kilnCreateTensorDesc", KILN_ERROR_INVALID_PARAM);
        io->descs.push_back(d);
        CHECK(kilnmdlSetDatasetTensorDesc(io->in, d, i));
      }
    }
    for (size_t i = 0; i < m.outputs.size(); ++i) io->add(io->out, out_bytes[i]);
    return io;
  }

  // Buffers of (model, input set), made on first use; outputs of open size grown until they fit.
  Io& buffers(const std::string& id, const std::string& key) {
    auto found = io_.find({id, key});
    if (found != io_.end()) return *found->second;
    Model& m = model(id);
    auto fit = feeds_.find(key);
    if (fit == feeds_.end()) throw Failure("no input set '" + key + "'");
    size_t input_bytes = 0;
    for (const auto& p : fit->second) input_bytes += p.second.data.size();
    size_t guess = std::max<size_t>(size_t{1} << 20, 4 * input_bytes);
    std::vector<size_t> out_bytes;
    bool open = false;
    for (const IoSpec& s : m.outputs) {
      out_bytes.push_back(s.bytes ? s.bytes : guess);
      open = open || !s.bytes;
    }
    for (;;) {
      std::unique_ptr<Io> io = make_io(m, fit->second, out_bytes);
      // On a thread of its own that then exits: a synchronous run on this thread would leave
      // it an OpenMP team idling beside the stream thread's that runs the timed executions
      // (see ComputeScope::Team in the runtime). A stream's run would do, but reports a
      // too-small output as a failed task, not as KILN_ERROR_MODEL_OUTPUT_NOT_MATCH.
      kilnError e = KILN_SUCCESS;
      std::thread sizing([&] {
        e = kilnrtSetDevice(0);
        if (e == KILN_SUCCESS) e = kilnmdlExecute(m.id, io->in, io->out);
      });
      sizing.join();
      if (e == KILN_SUCCESS) {
        Io& ref = *io;
        io_[{id, key}] = std::move(io);
        return ref;
      }
      if (e != KILN_ERROR_MODEL_OUTPUT_NOT_MATCH || !open || guess >= (size_t{1} << 34))
        fail_api("kilnmdlExecute of model " + id + " on input set " + key, e);
      guess *= 8;
      for (size_t i = 0; i < m.outputs.size(); ++i)
        if (!m.outputs[i].bytes) out_bytes[i] = guess;
    }
  }

  kilnrtStream stream_;
  std::map<std::string, std::unique_ptr<Model>> models_;
  std::map<std::string, std::vector<std::pair<std::string, HostTensor>>> feeds_;
  std::map<std::pair<std::string, std::string>, std::unique_ptr<Io>> io_;
};

std::string times_json(const std::vector<double>& times) {
  std::string s = "{\"times_ms\":[";
  char buf[32];
  for (size_t i = 0; i < times.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "%s%.6f", i ? "," : "", times[i]);
    s += buf;
  }
  return s + "]}";
}

std::string mem_json() {
  long rss = -1, hwm = -1;
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) rss = std::atol(line.c_str() + 6);
    if (line.rfind("VmHWM:", 0) == 0) hwm = std::atol(line.c_str() + 6);
  }
  kilnrtMemStats st{};
  CHECK(kilnrtGetMemStats(0, &st));
  return "{\"rss_kb\":" + std::to_string(rss) + ",\"hwm_kb\":" + std::to_string(hwm) +
         ",\"dev_in_use\":" + std::to_string(st.inUse) + ",\"dev_peak\":" + std::to_string(st.peakInUse) +
         ",\"dev_cached\":" + std::to_string(st.cached) + "}";
}

int serve(int argc, char** argv) {
  if (argc != 2 || std::atoi(argv[1]) < 1) throw Failure("usage: dyn_session THREADS");
  // The runtime gives each device its cores, capped by KILN_NUM_THREADS (read once, at init).
  setenv("KILN_NUM_THREADS", argv[1], 1);
  CHECK(kilnInit(nullptr));
  CHECK(kilnrtSetDevice(0));
  kilnrtStream stream = nullptr;
  CHECK(kilnrtCreateStream(&stream));
  int rc = 0;
  {
    Session session(stream);
    reply("{\"ready\":true}");
    std::string line;
    while (std::getline(std::cin, line)) {
      std::istringstream in(line);
      std::string command;
      in >> command;
      std::vector<std::string> words;
      for (std::string w; in >> w;) words.push_back(w);
      auto need = [&](size_t n, const char* usage) {
        if (words.size() < n) throw Failure(std::string("usage: ") + usage);
      };
      if (command == "quit") break;
      if (command == "load") {
        need(2, "load ID FILE.kiln");
        session.load(words[0], words[1]);
      } else if (command == "unload") {
        need(1, "unload ID");
        session.unload(words[0]);
      } else if (command == "feed") {
        need(2, "feed KEY NAME=FILE.npy ...");
        session.feed(words[0], std::vector<std::string>(words.begin() + 1, words.end()));
      } else if (command == "time") {
        need(4, "time ID KEY K W");
        int k = std::atoi(words[2].c_str()), w = std::atoi(words[3].c_str());
        if (k < 1 || w < 0) throw Failure("usage: time ID KEY K W (K >= 1, W >= 0)");
        reply(times_json(session.time(words[0], words[1], k, w)));
      } else if (command == "seq") {
        need(1, "seq ID:KEY ...");
        std::vector<std::pair<std::string, std::string>> steps;
        for (const std::string& w : words) {
          size_t colon = w.find(':');
          if (colon == std::string::npos) throw Failure("seq step '" + w + "' is not ID:KEY");
          steps.emplace_back(w.substr(0, colon), w.substr(colon + 1));
        }
        reply(times_json(session.seq(steps)));
      } else if (command == "save") {
        need(3, "save ID KEY DIR");
        session.save(words[0], words[1], words[2]);
      } else if (command == "mem") {
        reply(mem_json());
      } else {
        throw Failure("unknown command '" + command + "' (load, unload, feed, time, seq, save, mem, quit)");
      }
    }
  }
  kilnrtDestroyStream(stream);
  kilnrtResetDevice(0);
  kilnFinalize();
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return serve(argc, argv);
  } catch (const std::exception& e) {
    reply("{\"error\":\"" + json_escape(e.what()) + "\"}");
    return 1;
  }
}
