// png_info <file.png>: decodes a PNG with stb_image (independently of
// cifarnet's own image code) and prints "<width> <height> <channels> <mean>",
// the mean over every byte; exit status 1 with stb's reason when the file
// does not decode. The smoke tests of style_transfer and image_filters use it
// to check the PNGs those programs write.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>

#include "io/png_decode.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: png_info <file.png>\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "png_info: cannot open '%s'\n", argv[1]);
    return 1;
  }
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    const iotest::Image im = iotest::decode_png(bytes);
    const double sum = std::accumulate(im.pixels.begin(), im.pixels.end(), 0.0);
    std::printf("%d %d %d %.3f\n", im.width, im.height, im.channels,
                im.pixels.empty() ? 0.0 : sum / double(im.pixels.size()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "png_info: '%s' (%zu bytes) does not decode: %s\n", argv[1], bytes.size(), e.what());
    return 1;
  }
  return 0;
}
