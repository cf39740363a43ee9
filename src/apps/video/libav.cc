#include "apps/video/libav.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace kiln::video {
namespace {

// Sonames of the FFmpeg these headers come from: the ABI the struct's types describe.
#define KILN_STR2(x) #x
#define KILN_STR(x) KILN_STR2(x)
struct Library {
  const char* soname;
  const char* package;  // Debian's, for the error
};
const Library kAvutil{"libavutil.so." KILN_STR(LIBAVUTIL_VERSION_MAJOR), "libavutil" KILN_STR(LIBAVUTIL_VERSION_MAJOR)};
const Library kAvcodec{"libavcodec.so." KILN_STR(LIBAVCODEC_VERSION_MAJOR),
                       "libavcodec" KILN_STR(LIBAVCODEC_VERSION_MAJOR)};
const Library kAvformat{"libavformat.so." KILN_STR(LIBAVFORMAT_VERSION_MAJOR),
                        "libavformat" KILN_STR(LIBAVFORMAT_VERSION_MAJOR)};

Expected<LibAv> load() {
  // Never closed: FFmpeg keeps global state (the log callback) for the rest of the process.
  void* handles[3] = {};
  const Library* libs[3] = {&kAvutil, &kAvcodec, &kAvformat};
  for (int i = 0; i < 3; ++i) {
    handles[i] = ::dlopen(libs[i]->soname, RTLD_NOW | RTLD_LOCAL);
    if (!handles[i]) {
      const char* why = ::dlerror();
      return unavailable("video decoding needs FFmpeg's %s, which cannot be loaded (%s); install it with "
                         "`apt-get install %s`",
                         libs[i]->soname, why ? why : "unknown error", libs[i]->package);
    }
  }
  void* avutil = handles[0];
  void* avcodec = handles[1];
  void* avformat = handles[2];
  LibAv av;
#define KILN_LIBAV_RESOLVE(lib, fn)                                            \
  av.fn = reinterpret_cast<decltype(&::fn)>(::dlsym(lib, #fn));               \
  if (!av.fn)                                                                  \
    return unavailable("FFmpeg's lib" #lib " has no function " #fn ": not the " \
                       "FFmpeg version Kiln was built with");
  KILN_LIBAV_FUNCTIONS(KILN_LIBAV_RESOLVE)
#undef KILN_LIBAV_RESOLVE
  return av;
}

}  // namespace

Expected<const LibAv*> libav() {
  static std::once_flag once;
  static Expected<LibAv>* loaded = nullptr;  // never destroyed: used until process exit
  std::call_once(once, [] { loaded = new Expected<LibAv>(load()); });
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

}  // namespace kiln::video
