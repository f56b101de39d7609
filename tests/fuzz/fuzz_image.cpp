// Fuzz target: image loading (io/image.hpp: stb_image's JPEG, PNG and BMP
// decoders as cifarnet compiles them) and PNG encoding (io/png.hpp): decode
// as stored and converted to 1 and 3 channels, load_image8 on a file; a
// decoded image (when small) must survive encode_png -> decode unchanged.
#include <vector>

#include "cifarnet/io/image.hpp"
#include "cifarnet/io/png.hpp"
#include "fuzz_target.hpp"

using namespace cifarnet;

CIFARNET_FUZZ_TARGET(image) {
  for (int channels : {0, 1, 3}) {
    fuzz::ignore_errors([&] {
      const io::Image8 img = io::decode_image(data, size, "<fuzz>", channels);
      FUZZ_CHECK(img.height > 0 && img.width > 0 && img.channels >= 1 && img.channels <= 4);
      FUZZ_CHECK(channels == 0 || img.channels == std::size_t(channels));
      FUZZ_CHECK(img.pixels.size() == img.height * img.width * img.channels);
      if (channels != 0 || img.height * img.width > 4096) return;
      const std::string png =
          io::encode_png(img.pixels.data(), int(img.height), int(img.width), int(img.channels));
      const io::Image8 back =
          io::decode_image(reinterpret_cast<const std::uint8_t*>(png.data()), png.size(), "<png>");
      FUZZ_CHECK(back.height == img.height && back.width == img.width && back.channels == img.channels);
      FUZZ_CHECK(back.pixels == img.pixels);
    });
  }
  fuzz::TempFile f(data, size, ".png");
  fuzz::ignore_errors([&] { io::load_image8(f.path()); });
  return 0;
}
