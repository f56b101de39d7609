// image_filters — the style-transfer seed's hand-made kernels (TF_SEMANTICS.md §7):
// blur, sharpen, edge, top Sobel and emboss, gray (3x3x1x1) and RGB
// (3x3x3x3) versions, applied with conv2d, stride 3, SAME padding, to an
// image scaled to [0, 1) by /256. The seed showed the results side by side
// with matplotlib; this program writes them into one PNG:
//
//   row "gray": the grayscale input, then each gray kernel's map
//   row "rgb":  the input, then each RGB kernel's map
//
// Each map is ceil(H/3) x ceil(W/3); it is enlarged 3x by pixel repetition
// (each output pixel covers the 3x3 input block it was computed from) and
// cropped to the input's size, so tiles line up with the input.
//
// Display (--display seed, the default) imitates plt.imshow as the seed
// calls it: RGB tiles are clipped to [0, 1] and scaled to 0..255 (imshow
// clips float RGB data); gray tiles are stretched from their own minimum
// (black) to maximum (white), as imshow's gray colour map does. --display
// minmax stretches every tile, RGB too, from its minimum to its maximum.
//
//   image_filters                              # built-in test image
//   image_filters --image photo.jpg --output filters.png --mode gray
#include <CLI/CLI.hpp>

#include <cifarnet/io/image.hpp>
#include <cifarnet/vision/filters.hpp>
#include <cifarnet/demo/images.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "../common/run_main.hpp"

using namespace cifarnet;
using namespace cifarnet::vision;

namespace {

struct Flags {
  std::string image, output = "image_filters.png", mode = "both", display = "seed", relu_clip = "sobel";
  std::size_t stride = 3, max_side = 512, gap = 4;
  bool seed_list = false;
};

/// One tile's display bytes (RGB, H x W of the input) from a map.
io::Image8 to_tile(const cifarnet::Image& map, std::size_t h, std::size_t w, std::size_t scale,
                   bool seed_display) {
  float lo = map.data.empty() ? 0.0f : map.data[0], hi = lo;
  for (float v : map.data) lo = std::min(lo, v), hi = std::max(hi, v);
  const bool stretch = !seed_display || map.channels == 1;
  io::Image8 tile(h, w, 3);
  for (std::size_t y = 0; y < h; ++y)
    for (std::size_t x = 0; x < w; ++x)
      for (std::size_t c = 0; c < 3; ++c) {
        const float v = map.at(std::min(y / scale, map.height - 1), std::min(x / scale, map.width - 1),
                               map.channels == 1 ? 0 : c);
        float u = stretch ? (hi > lo ? (v - lo) / (hi - lo) : 0.0f) : std::clamp(v, 0.0f, 1.0f);
        tile.at(y, x, c) = std::uint8_t(std::lround(255.0f * u));
      }
  return tile;
}

int run(const Flags& f) {
  cifarnet::Image img;
  if (f.image.empty()) {
    img = builtin_filter_image();
    std::cout << "image_filters: no --image given; using the BUILT-IN TEST IMAGE (" << img.height << "x"
              << img.width << ": a disc, a square, a triangle, stripes and a checkerboard on a gradient)\n";
  } else {
    img = io::load_image(f.image, 3);
    std::cout << "image_filters: " << f.image << " (" << img.height << "x" << img.width << ")\n";
  }
  if (f.max_side > 0 && std::max(img.height, img.width) > f.max_side) {
    const double s = double(f.max_side) / double(std::max(img.height, img.width));
    img = io::resize(img, std::max<std::size_t>(1, std::size_t(img.height * s + 0.5)),
                     std::max<std::size_t>(1, std::size_t(img.width * s + 0.5)));
    std::cout << "  resized to " << img.height << "x" << img.width << " (--max-side " << f.max_side << ")\n";
  }
  const cifarnet::Image unit = to_unit_range(img);  // the seed's /256
  const bool seed_display = f.display == "seed";
  std::vector<std::vector<io::Image8>> rows;
  std::vector<std::string> row_names;
  for (bool rgb : {false, true}) {
    if ((rgb && f.mode == "gray") || (!rgb && f.mode == "rgb")) continue;
    const cifarnet::Image input = rgb ? unit : rgb_to_grayscale(unit);
    std::vector<Kernel> ks = seed_kernels(rgb);
    for (auto& k : ks)
      k.relu_clip =
          (f.relu_clip == "sobel" && k.name == "top_sobel") || (f.relu_clip == "edge" && k.name == "edge");
    if (f.seed_list) ks.erase(ks.begin());  // the seed's kernels_list[1:]
    std::vector<io::Image8> tiles{to_tile(input, img.height, img.width, 1, seed_display)};
    std::printf("  %-4s %-10s %4zux%-4zu %3zu ch  min %9.4f  max %9.4f\n", rgb ? "rgb" : "gray", "input",
                input.height, input.width, input.channels,
                double(*std::min_element(input.data.begin(), input.data.end())),
                double(*std::max_element(input.data.begin(), input.data.end())));
    for (const auto& k : ks) {
      const cifarnet::Image m = convolve(input, k, f.stride);
      std::printf(
          "  %-4s %-10s %4zux%-4zu %3zu ch  min %9.4f  max %9.4f%s\n", rgb ? "rgb" : "gray", k.name.c_str(),
          m.height, m.width, m.channels, double(*std::min_element(m.data.begin(), m.data.end())),
          double(*std::max_element(m.data.begin(), m.data.end())), k.relu_clip ? "  (ReLU, clip 255)" : "");
      tiles.push_back(to_tile(m, img.height, img.width, f.stride, seed_display));
    }
    rows.push_back(std::move(tiles));
    row_names.push_back(rgb ? "rgb" : "gray");
  }
  // Compose the grid on a white background.
  const std::size_t cols = rows.front().size(), g = f.gap;
  io::Image8 grid(rows.size() * img.height + (rows.size() + 1) * g, cols * img.width + (cols + 1) * g, 3,
                  255);
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (std::size_t c = 0; c < cols; ++c) {
      const io::Image8& t = rows[r][c];
      const std::size_t y0 = g + r * (img.height + g), x0 = g + c * (img.width + g);
      for (std::size_t y = 0; y < t.height; ++y)
        std::copy_n(t.pixels.begin() + long(y * t.width * 3), t.width * 3,
                    grid.pixels.begin() + long(((y0 + y) * grid.width + x0) * 3));
    }
  io::save_image(f.output, grid);
  std::string order = "input";
  for (const auto& k : seed_kernels(false))
    if (!(f.seed_list && k.name == "blur")) order += ", " + k.name;
  std::cout << "wrote " << f.output << " (" << grid.height << "x" << grid.width << "): rows ";
  for (std::size_t r = 0; r < row_names.size(); ++r) std::cout << (r ? ", " : "") << row_names[r];
  std::cout << "; columns " << order << "; display '" << f.display << "'\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{
      "The style-transfer seed's hand-made 3x3 kernels (TF_SEMANTICS.md §7) applied with conv2d, written as "
      "one PNG"};
  app.add_option("--image", f.image, "Input image (JPEG, PNG or BMP). Default: a built-in test image.");
  app.add_option("--output", f.output, "Output PNG (or .jpg) with the input and every map side by side.")
      ->capture_default_str();
  app.add_option("--mode", f.mode, "Kernels: gray (3x3x1x1, the seed's default), rgb (3x3x3x3) or both rows.")
      ->check(CLI::IsMember({"gray", "rgb", "both"}))
      ->capture_default_str();
  app.add_option("--stride", f.stride, "Convolution stride (the seed: 3).")
      ->check(CLI::Range(std::size_t(1), std::size_t(64)))
      ->capture_default_str();
  app.add_option(
         "--relu-clip", f.relu_clip,
         "Which map gets tf.minimum(tf.nn.relu(x), 255): sobel (what the seed's code does: index 2 of its "
         "list after dropping blur), edge (what it meant), none.")
      ->check(CLI::IsMember({"sobel", "edge", "none"}))
      ->capture_default_str();
  app.add_flag("--seed-list", f.seed_list, "Drop blur, as the seed's kernels_list[1:] does.");
  app.add_option("--display", f.display,
                 "Tile normalization: seed (imshow-like) or minmax (see the source header).")
      ->check(CLI::IsMember({"seed", "minmax"}))
      ->capture_default_str();
  app.add_option("--max-side", f.max_side, "Shrink larger inputs to this longer side first (0: never).")
      ->capture_default_str();
  return examples::parse_and_run(app, argc, argv, "image_filters", [&] { return run(f); });
}
