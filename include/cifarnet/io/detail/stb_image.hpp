// cifarnet/io/detail/stb_image.hpp — Debian's stb_image (decoding) and
// stb_image_resize, compiled into each translation unit that includes this
// header with internal linkage (STB_IMAGE_STATIC, STB_IMAGE_RESIZE_STATIC),
// exactly as io/png.hpp does for stb_image_write. Nothing is exported, so any
// number of translation units can include cifarnet headers without duplicate
// symbols and no -lstb is needed.
//
// If a translation unit already included <stb/stb_image.h> (or
// stb_image_resize.h) before this header, those declarations are used instead
// and the program must provide the implementation itself (a unit that defines
// STB_IMAGE_IMPLEMENTATION, or -lstb); a unit that defines
// STB_IMAGE_IMPLEMENTATION itself must not include this header. Decoding is
// limited to JPEG, PNG and BMP (STBI_ONLY_*), the formats cifarnet documents.
#pragma once

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wdouble-promotion"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wcast-qual"
#pragma GCC diagnostic ignored "-Wold-style-cast"
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wshadow"
#if !defined(__clang__)  // a GCC-only warning (clang: "unknown warning group")
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

#ifndef STBI_INCLUDE_STB_IMAGE_H
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_JPEG
#define STBI_ONLY_PNG
#define STBI_ONLY_BMP
#define STBI_NO_STDIO  // files are read by cifarnet (errors name the file)
#include <stb/stb_image.h>
#undef STB_IMAGE_IMPLEMENTATION
#endif

#ifndef STBIR_INCLUDE_STB_IMAGE_RESIZE_H
#define STB_IMAGE_RESIZE_STATIC
#define STB_IMAGE_RESIZE_IMPLEMENTATION
#include <stb/stb_image_resize.h>
#undef STB_IMAGE_RESIZE_IMPLEMENTATION
#endif

#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
