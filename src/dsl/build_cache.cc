// Compile-and-cache of emitted kernels: hash, compile to a temporary name, rename, dlopen.
#include "dsl/build_cache.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "core/cpu_features.h"
#include "core/version.h"

namespace kiln::dsl {
namespace {

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `cmd`, returns its exit status and its combined output.
int run_command(const std::string& cmd, std::string* output) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) output->append(buf, n);
  return pclose(p);
}

// The compiler's identity, asked once per process.
const std::string& compiler_version() {
  static const std::string v = [] {
    std::string out;
    run_command("c++ --version", &out);
    return out.substr(0, out.find('\n'));
  }();
  return v;
}

std::string isa_features() {
  // The features -march=native turns into code paths of the kernels built here.
  std::string s;
  for (const char* name : {"sse4.2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl"})
    if (cpu_features().has(name)) s += std::string(name) + " ";
  return s;
}

std::mutex& build_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

Kernel::~Kernel() {
  if (handle_) dlclose(handle_);
}

Status Kernel::run(const std::vector<float*>& buffers, const std::vector<int64_t>& dims) const {
  if (buffers.size() != num_buffers_)
    return invalid_argument("DSL kernel: %zu buffers given, it takes %zu", buffers.size(), num_buffers_);
  if (dims.size() != dim_names_.size())
    return invalid_argument("DSL kernel: %zu dims given, it takes %zu", dims.size(), dim_names_.size());
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] < 1)
      return invalid_argument("DSL kernel: dim %s = %lld, must be >= 1", dim_names_[i].c_str(),
                              static_cast<long long>(dims[i]));
  int rc = entry_(buffers.data(), dims.data());
  if (rc == 0) return ok_status();
  if (rc > 0 && static_cast<size_t>(rc) <= source_.checks.size())
    return out_of_range("DSL kernel: %s", source_.checks[rc - 1].c_str());
  return internal_error("DSL kernel returned %d", rc);
}

std::string dsl_cache_dir() {
  if (const char* d = std::getenv("KILN_DSL_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/kiln/dsl";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/kiln/dsl";
  return (std::filesystem::temp_directory_path() / "kiln-dsl").string();
}

std::string dsl_compile_flags() {
  // -fno-math-errno and -fno-trapping-math (not -ffast-math: NaN and inf keep their meaning)
  // let sqrt and divisions vectorise.
  return "c++ -std=c++17 -O3 -march=native -fPIC -shared -fopenmp -fno-math-errno -fno-trapping-math";
}

Expected<std::shared_ptr<Kernel>> build(const LoweredFunc& f) {
  std::shared_ptr<Kernel> k(new Kernel());
  k->source_ = codegen_c(f);
  k->num_buffers_ = f.args.size();
  for (const Expr& d : f.dims) k->dim_names_.push_back(d->name);

  const std::string flags = dsl_compile_flags();
  uint64_t h = fnv1a(k->source_.code);
  h = fnv1a("\n" + flags + "\n" + compiler_version() + "\n" + isa_features() + "\n" KILN_VERSION_STRING, h);
  char key[17];
  std::snprintf(key, sizeof key, "%016llx", static_cast<unsigned long long>(h));
  namespace fs = std::filesystem;
  const fs::path dir = dsl_cache_dir();
  const fs::path so = dir / (std::string(key) + ".so");
  k->path_ = so.string();

  std::lock_guard<std::mutex> lock(build_mutex());
  std::error_code ec;
  if (fs::exists(so, ec)) {
    k->from_cache_ = true;
  } else {
    fs::create_directories(dir, ec);
    if (ec) return unavailable("DSL cache folder %s: %s", dir.c_str(), ec.message().c_str());
    const fs::path cc = dir / (std::string(key) + ".cc");
    // A temporary name per process, renamed into place: concurrent builders never see half a file.
    const fs::path tmp = dir / (std::string(key) + ".so.tmp" + std::to_string(getpid()));
    {
      std::ofstream out(cc);
      out << k->source_.code;
      if (!out) return unavailable("cannot write %s", cc.c_str());
    }
    std::string log;
    int rc = run_command(flags + " -o " + shell_quote(tmp.string()) + " " + shell_quote(cc.string()), &log);
    if (rc != 0) {
      fs::remove(tmp, ec);
      return internal_error("DSL kernel %s: the compiler failed (%s -o ... %s):\n%s", f.name.c_str(),
                            flags.c_str(), cc.c_str(), log.c_str());
    }
    fs::rename(tmp, so, ec);
    if (ec) return unavailable("cannot move %s into the DSL cache: %s", tmp.c_str(), ec.message().c_str());
  }
  // RTLD_NODELETE: the library (and the OpenMP runtime it pulls in) stays mapped after the
  // last Kernel goes, since OpenMP's pool threads outlive the call that started them.
  k->handle_ = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!k->handle_) return unavailable("cannot load DSL kernel %s: %s", so.c_str(), dlerror());
  k->entry_ = reinterpret_cast<EntryFn>(dlsym(k->handle_, kEntrySymbol));
  if (!k->entry_) return unavailable("DSL kernel %s has no symbol %s", so.c_str(), kEntrySymbol);
  return k;
}

}  // namespace kiln::dsl
