// Tests of cifarnet/data/pipeline.hpp, sources.hpp and recipes.hpp: stream
// order (repeat, shuffle, batch), both data formats, determinism across
// worker counts, exact resume, shutdown with a full queue, worker errors.
#include <catch2/catch.hpp>

#include <cifarnet/data/pipeline.hpp>
#include <cifarnet/data/recipes.hpp>
#include <cifarnet/data/sources.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "data_test_util.hpp"

using namespace cifarnet;
using namespace cifarnet::data;
using cifarnet_test::require_throws_with;
using cifarnet_test::TempDir;

namespace {

/// Example i is an h x w x c image whose every value is i (so a batch shows
/// which examples it holds), label i % 10. Optionally slow, or failing on
/// one index.
struct IndexSource {
  std::size_t n = 10;
  ImageGeometry g{2, 3, 2};
  std::int64_t fail_at = -1;
  int sleep_us = 0;
  std::shared_ptr<std::atomic<int>> decoded = std::make_shared<std::atomic<int>>(0);

  std::size_t size() const { return n; }
  ImageGeometry geometry() const { return g; }
  std::size_t num_classes() const { return 10; }
  std::int32_t decode(std::size_t i, float* hwc) const {
    if (static_cast<std::int64_t>(i) == fail_at)
      throw DataError(cifarnet::detail::concat("IndexSource: example ", i, " is broken"));
    if (sleep_us) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    for (std::size_t k = 0; k < g.size(); ++k) hwc[k] = static_cast<float>(i);
    ++*decoded;
    return static_cast<std::int32_t>(i % 10);
  }
};

/// Which example each row of an IndexSource batch holds.
std::vector<std::int64_t> ids(const Batch& b) {
  std::vector<std::int64_t> out;
  const std::size_t per = b.images.size() / std::max<std::size_t>(b.size(), 1);
  for (std::size_t i = 0; i < b.size(); ++i)
    out.push_back(static_cast<std::int64_t>(b.images.data()[i * per]));
  return out;
}

std::vector<std::vector<std::int64_t>> all_ids(Pipeline<IndexSource>& p, std::size_t max_batches = 1000) {
  std::vector<std::vector<std::int64_t>> out;
  Batch b;
  while (out.size() < max_batches && p.next(b)) out.push_back(ids(b));
  return out;
}

PipelineOptions opts(std::size_t batch, ShuffleMode mode, std::uint64_t epochs, std::size_t workers = 2) {
  PipelineOptions o;
  o.batch_size = batch;
  o.shuffle = mode;
  o.epochs = epochs;
  o.num_workers = workers;
  o.seed = 42;
  return o;
}

/// A synthetic 32x32x3 image set with varied pixels.
ImageSet synthetic_set(std::size_t n) {
  ImageSet s;
  s.num_classes = 10;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < 3072; ++j)
      s.pixels.push_back(cifarnet_test::pattern_byte(i, j * (i % 7 + 1)));
    s.labels.push_back(static_cast<std::int32_t>(i % 10));
  }
  return s;
}

template <class P>
std::vector<Batch> take(P& p, std::size_t n) {
  std::vector<Batch> out;
  for (std::size_t i = 0; i < n; ++i) {
    Batch b;
    REQUIRE(p.next(b));
    out.push_back(std::move(b));
  }
  return out;
}

std::vector<std::size_t> dims(const Tensor<float>& t) { return {t.shape().begin(), t.shape().end()}; }

void require_same(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("batch " << i);
    REQUIRE(a[i].index == b[i].index);
    REQUIRE(a[i].labels == b[i].labels);
    REQUIRE(a[i].images.shape() == b[i].images.shape());
    REQUIRE(std::equal(a[i].images.begin(), a[i].images.end(), b[i].images.begin()));
  }
}

}  // namespace

TEST_CASE("without shuffling, batches follow file order and the last partial batch is kept or dropped",
          "[data][pipeline]") {
  for (std::size_t workers : {0, 1, 3}) {
    INFO("workers " << workers);
    Pipeline<IndexSource> keep(IndexSource{}, opts(4, ShuffleMode::none, 1, workers));
    CHECK(all_ids(keep) == std::vector<std::vector<std::int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}});
    Batch b;
    CHECK_FALSE(keep.next(b));  // stays at the end
    auto o = opts(4, ShuffleMode::none, 1, workers);
    o.drop_remainder = true;
    Pipeline<IndexSource> drop(IndexSource{}, o);
    CHECK(all_ids(drop) == std::vector<std::vector<std::int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}});
    CHECK(drop.batches_per_epoch() == 2);
    CHECK(keep.batches_per_epoch() == 3);
  }
}

TEST_CASE("repeat joins epochs into one stream, so batches straddle epoch boundaries", "[data][pipeline]") {
  Pipeline<IndexSource> p(IndexSource{}, opts(4, ShuffleMode::none, 2));
  CHECK(all_ids(p) == std::vector<std::vector<std::int64_t>>{
                          {0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 0, 1}, {2, 3, 4, 5}, {6, 7, 8, 9}});
  Pipeline<IndexSource> forever(IndexSource{}, opts(4, ShuffleMode::none, 0));
  const auto got = all_ids(forever, 30);  // 120 examples = 12 epochs, never ends
  REQUIRE(got.size() == 30);
  CHECK(got[29] == std::vector<std::int64_t>{6, 7, 8, 9});
  Batch b;
  CHECK(forever.next(b));
  CHECK(b.index == 30);
  CHECK(b.labels == std::vector<std::int32_t>{0, 1, 2, 3});
}

TEST_CASE("batches come in NHWC or NCHW with the same values", "[data][pipeline]") {
  ImageSetSource src(synthetic_set(6));
  auto o = opts(4, ShuffleMode::none, 1);
  Pipeline<ImageSetSource> nhwc(std::make_shared<const ImageSetSource>(src), o);
  o.format = DataFormat::NCHW;
  Pipeline<ImageSetSource> nchw(std::make_shared<const ImageSetSource>(src), o);
  Batch a, b;
  REQUIRE(nhwc.next(a));
  REQUIRE(nchw.next(b));
  CHECK(dims(a.images) == std::vector<std::size_t>{4, 32, 32, 3});
  CHECK(dims(b.images) == std::vector<std::size_t>{4, 3, 32, 32});
  const ImageSet& set = src.images();
  for (std::size_t n = 0; n < 4; ++n)
    for (std::size_t c = 0; c < 3; ++c)
      for (std::size_t y = 0; y < 32; y += 5)
        for (std::size_t x = 0; x < 32; x += 3) {
          const float want = set.image(n)[c * 1024 + y * 32 + x];  // uint8 CHW in the set
          REQUIRE(a.images(n, y, x, c) == want);
          REQUIRE(b.images(n, c, y, x) == want);
        }
  REQUIRE(nhwc.next(a));  // the partial last batch has its own shape
  CHECK(dims(a.images) == std::vector<std::size_t>{2, 32, 32, 3});
  CHECK(a.labels == std::vector<std::int32_t>{4, 5});
}

TEST_CASE("permutation shuffling visits every example once per epoch, in a new order each epoch",
          "[data][pipeline][shuffle]") {
  IndexSource src;
  src.n = 50;
  Pipeline<IndexSource> p(src, opts(10, ShuffleMode::permutation, 3));
  std::vector<std::int64_t> stream;
  for (const auto& b : all_ids(p)) stream.insert(stream.end(), b.begin(), b.end());
  REQUIRE(stream.size() == 150);
  std::vector<std::vector<std::int64_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    std::vector<std::int64_t> ep(stream.begin() + 50 * e, stream.begin() + 50 * (e + 1));
    epochs.push_back(ep);
    std::sort(ep.begin(), ep.end());
    for (int i = 0; i < 50; ++i) REQUIRE(ep[i] == i);
  }
  CHECK(epochs[0] != epochs[1]);
  CHECK(epochs[1] != epochs[2]);
}

TEST_CASE("buffer shuffling draws among the next shuffle_buffer examples, across epochs",
          "[data][pipeline][shuffle]") {
  IndexSource src;
  src.n = 100;
  auto o = opts(8, ShuffleMode::buffer, 3);
  o.shuffle_buffer = 16;
  Pipeline<IndexSource> p(src, o);
  CHECK(p.shuffle_buffer() == 16);
  std::vector<std::int64_t> stream;
  for (const auto& b : all_ids(p)) stream.insert(stream.end(), b.begin(), b.end());
  REQUIRE(stream.size() == 300);
  std::map<std::int64_t, int> count;
  for (auto v : stream) ++count[v];
  for (int i = 0; i < 100; ++i) CHECK(count[i] == 3);
  // the k-th example out was among the first k + 16 examples read, and
  // index v is read first at input position v
  for (std::size_t k = 0; k < stream.size(); ++k) CHECK(stream[k] < static_cast<std::int64_t>(k) + 16);
  CHECK(stream != std::vector<std::int64_t>(stream.size(), 0));
  std::vector<std::int64_t> first(stream.begin(), stream.begin() + 100);
  CHECK_FALSE(std::is_sorted(first.begin(), first.end()));
  // buffer 1 is file order; the default is 40 % of an epoch + 3 batches
  o.shuffle_buffer = 1;
  Pipeline<IndexSource> ordered(src, o);
  CHECK(all_ids(ordered, 1)[0] == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  o.shuffle_buffer = 0;
  CHECK(Pipeline<IndexSource>(src, o).shuffle_buffer() == 40 + 3 * 8);
  CHECK(default_shuffle_buffer(40000, 128) == 16000 + 384);
}

TEST_CASE("the same seed gives the same batches whatever the number of workers",
          "[data][pipeline][determinism]") {
  const auto src = std::make_shared<const ImageSetSource>(synthetic_set(40));
  using P = recipes::TutorialTrainT<ImageSetSource>;
  std::vector<Batch> reference;
  for (std::size_t workers : {0, 1, 2, 4}) {
    for (std::size_t prefetch : {1, 3}) {
      INFO("workers " << workers << ", prefetch " << prefetch);
      auto o = recipes::tutorial_train_options(7, 6);
      o.num_workers = workers;
      o.prefetch = prefetch;
      P p(src, o);
      auto got = take(p, 15);  // more than two epochs
      if (reference.empty())
        reference = std::move(got);
      else
        require_same(got, reference);
    }
  }
  CHECK(dims(reference[0].images) == std::vector<std::size_t>{6, 24, 24, 3});
  auto o = recipes::tutorial_train_options(8, 6);
  P other(src, o);
  const auto diff = take(other, 1);
  CHECK_FALSE(std::equal(diff[0].images.begin(), diff[0].images.end(), reference[0].images.begin()));
}

TEST_CASE("byte batches carry the float batches' values as bytes, and a non-byte value is a clear error",
          "[data][pipeline][bytes]") {
  const auto src = std::make_shared<const ImageSetSource>(synthetic_set(7));
  for (DataFormat fmt : {DataFormat::NHWC, DataFormat::NCHW}) {
    auto o = opts(3, ShuffleMode::buffer, 0);
    o.format = fmt;
    recipes::ResNetTrainT<ImageSetSource> floats(src, o);  // pad-and-crop, flips: whole values in [0, 255]
    o.byte_pixels = true;
    recipes::ResNetTrainT<ImageSetSource> bytes(src, o);
    for (int k = 0; k < 3; ++k) {
      Batch f, b;
      REQUIRE(floats.next(f));
      REQUIRE(bytes.next(b));
      CHECK(b.images.size() == 0);
      CHECK(b.has_pixels());
      CHECK_FALSE(f.has_pixels());
      CHECK(b.labels == f.labels);
      CHECK(b.pixels.size() == f.images.size());
      CHECK((b.pixel_height == 32 && b.pixel_width == 32 && b.pixel_channels == 3));
      Tensor<float> back;
      pixels_to_images(b, fmt, back);
      REQUIRE(back.shape() == f.images.shape());
      CHECK(std::equal(back.begin(), back.end(), f.images.begin()));
    }
    CHECK(bytes.position() == floats.position());  // the same stream, only delivered as bytes
  }
  // A colour transform leaves fractions: not bytes.
  auto o = opts(3, ShuffleMode::none, 0);
  o.byte_pixels = true;
  Pipeline<ImageSetSource, PadCrop<4>, RandomFlipLR, RandomBrightness<63>> bright(src, o);
  Batch b;
  CHECK_THROWS_WITH(bright.next(b), Catch::Contains("byte_pixels") && Catch::Contains("not a byte value"));
}

TEST_CASE("each example is decoded once and augmented with the generator of its stream position",
          "[data][pipeline][determinism]") {
  const auto src = std::make_shared<const ImageSetSource>(synthetic_set(5));
  using P = Pipeline<ImageSetSource, PadCrop<4>, RandomFlipLR, RandomBrightness<63>>;
  auto o = opts(3, ShuffleMode::none, 0);
  P p(src, o);
  const auto batches = take(p, 4);
  Image img, scratch;
  for (std::size_t b = 0; b < 4; ++b)
    for (std::size_t i = 0; i < 3; ++i) {
      const std::uint64_t k = b * 3 + i;
      decode_chw_to_hwc(src->images().image(k % 5), src->geometry(), img);
      Rng rng = p.example_rng(k);
      pad_and_random_crop(img, 4, rng, scratch);
      random_flip_left_right(scratch, rng);
      random_brightness(scratch, 63.0f, rng);
      REQUIRE(std::equal(scratch.data.begin(), scratch.data.end(), batches[b].images.data() + i * 3072));
      REQUIRE(batches[b].labels[i] == static_cast<std::int32_t>(k % 5 % 10));
    }
}

TEST_CASE("a saved position resumes with exactly the batches that would have followed",
          "[data][pipeline][resume]") {
  const auto src = std::make_shared<const ImageSetSource>(synthetic_set(30));
  using P = recipes::ResNetTrainT<ImageSetSource>;
  for (ShuffleMode mode : {ShuffleMode::buffer, ShuffleMode::permutation, ShuffleMode::none}) {
    INFO("shuffle " << to_string(mode));
    auto o = recipes::resnet_train_options(11, 4);
    o.shuffle = mode;
    o.shuffle_buffer = 10;
    P a(src, o);
    CHECK(a.position().examples == 0);
    take(a, 7);  // 28 examples: inside epoch 0 (buffer mode has read ahead into epoch 1)
    const PipelinePosition pos = a.position();
    CHECK(pos.batches == 7);
    CHECK(pos.examples == 28);
    const auto expected = take(a, 9);

    // another pipeline, another worker count, position through a string
    o.num_workers = 1;
    P b(src, o);
    b.restore(PipelinePosition::parse(pos.to_string()));
    CHECK(b.position() == pos);
    require_same(take(b, 9), expected);

    // and through the nine words, into the same pipeline (a rewind)
    a.restore(PipelinePosition::from_words(pos.to_words()));
    require_same(take(a, 9), expected);
    a.reset();
    CHECK(a.position().batches == 0);
  }
}

TEST_CASE("a position from a pipeline with another seed or stream is refused", "[data][pipeline][resume]") {
  Pipeline<IndexSource> a(IndexSource{}, opts(4, ShuffleMode::buffer, 0));
  all_ids(a, 3);
  const PipelinePosition pos = a.position();
  auto o = opts(4, ShuffleMode::buffer, 0);
  o.seed = 43;
  Pipeline<IndexSource> other_seed(IndexSource{}, o);
  require_throws_with<ConfigError>([&] { other_seed.restore(pos); }, {"different seed"});
  o = opts(5, ShuffleMode::buffer, 0);
  Pipeline<IndexSource> other_batch(IndexSource{}, o);
  CHECK_THROWS_AS(other_batch.restore(pos), ConfigError);
  PipelinePosition forged = pos;
  forged.examples += 1;
  require_throws_with<ConfigError>([&] { a.restore(forged); }, {"does not match"});
  CHECK_THROWS_AS(PipelinePosition::parse("pipeline-position-v1 1 2 3"), ConfigError);
  CHECK_THROWS_AS(PipelinePosition::parse("position 1 2 3 4 5 6 7 8 9"), ConfigError);
  CHECK_THROWS_AS(PipelinePosition::parse("pipeline-position-v1 1 2 3 4 5 6 7 8 -9"), ConfigError);
  CHECK_THROWS_AS(PipelinePosition::parse("pipeline-position-v1 1 2 3 4 5 6 7 8 99999999999999999999"),
                  ConfigError);
  CHECK_THROWS_AS(PipelinePosition::parse(pos.to_string() + " 1"), ConfigError);
  // workers and prefetch do not change the stream, so they may differ
  o = opts(4, ShuffleMode::buffer, 0, 0);
  o.prefetch = 1;
  Pipeline<IndexSource> fewer(IndexSource{}, o);
  CHECK_NOTHROW(fewer.restore(pos));
}

TEST_CASE("destroying a pipeline with a full queue and busy workers returns promptly",
          "[data][pipeline][threads]") {
  IndexSource slow;
  slow.n = 1000;
  slow.sleep_us = 200;
  const auto t0 = std::chrono::steady_clock::now();
  {
    auto o = opts(8, ShuffleMode::none, 0, 3);
    o.prefetch = 2;
    Pipeline<IndexSource> p(slow, o);
    Batch b;
    REQUIRE(p.next(b));
    // let the workers fill the queue and block on it
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(*slow.decoded <= 8 * (1 + 2 + 3));  // bounded: queue + one batch per worker at most
  }  // destructor: stop and join with a full queue and workers waiting
  { Pipeline<IndexSource> never_started(slow, opts(8, ShuffleMode::none, 0, 3)); }
  {
    Pipeline<IndexSource> mid_batch(slow, opts(64, ShuffleMode::none, 0, 2));
    Batch b;
    REQUIRE(mid_batch.next(b));  // workers are now inside decode()
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(s < 5.0);
}

TEST_CASE("an exception in a worker reaches the consumer at that batch, and again after",
          "[data][pipeline][threads]") {
  for (std::size_t workers : {0, 1, 3}) {
    INFO("workers " << workers);
    IndexSource bad;
    bad.n = 40;
    bad.fail_at = 13;
    Pipeline<IndexSource> p(bad, opts(4, ShuffleMode::none, 0, workers));
    Batch b;
    for (int i = 0; i < 3; ++i) {
      REQUIRE(p.next(b));
      CHECK(ids(b)[0] == 4 * i);
    }
    require_throws_with<DataError>([&] { p.next(b); }, {"example 13 is broken"});
    require_throws_with<DataError>([&] { p.next(b); }, {"example 13 is broken"});
    // a restore to a good position clears the failure
    p.reset();
    REQUIRE(p.next(b));
    CHECK(ids(b) == std::vector<std::int64_t>{0, 1, 2, 3});
  }
}

TEST_CASE("bad pipeline options are ConfigErrors naming the option", "[data][pipeline][errors]") {
  auto o = opts(0, ShuffleMode::none, 0);
  require_throws_with<ConfigError>([&] { Pipeline<IndexSource>(IndexSource{}, o); }, {"batch_size"});
  o = opts(4, ShuffleMode::none, 0);
  o.prefetch = 0;
  require_throws_with<ConfigError>([&] { Pipeline<IndexSource>(IndexSource{}, o); }, {"prefetch"});
  IndexSource empty;
  empty.n = 0;
  require_throws_with<ConfigError>([&] { Pipeline<IndexSource>(empty, opts(4, ShuffleMode::none, 0)); },
                                   {"no examples"});
  IndexSource tiny;
  tiny.g = {8, 8, 3};
  require_throws_with<ConfigError>(
      [&] { Pipeline<IndexSource, RandomCrop<24, 24>>(tiny, opts(4, ShuffleMode::none, 0)); },
      {"RandomCrop<24, 24>"});
  ImageSet bad = synthetic_set(3);
  bad.labels[2] = 10;
  require_throws_with<DataError>([&] { ImageSetSource{bad}; }, {"label 10 of image 2 out of range"});
  bad.labels.pop_back();
  require_throws_with<DataError>([&] { ImageSetSource{bad}; }, {"pixel bytes for 2 labels"});
}

TEST_CASE("the recipes produce the seeds' image sizes and value ranges", "[data][pipeline][recipes]") {
  const auto src = std::make_shared<const ImageSetSource>(synthetic_set(20));
  recipes::ResNetTrainT<ImageSetSource> resnet(src, recipes::resnet_train_options(1, 8));
  CHECK(resnet.output_geometry() == ImageGeometry{32, 32, 3});
  CHECK(resnet.shuffle_buffer() == 8 + 24);
  Batch b;
  REQUIRE(resnet.next(b));
  float lo = 1e9f, hi = -1e9f;
  for (float v : b.images) lo = std::min(lo, v), hi = std::max(hi, v);
  CHECK(lo == 0.0f);  // raw 0..255 (the model scales), with zero padding
  CHECK(hi <= 255.0f);

  recipes::ResNetEvalT<ImageSetSource> eval(src, recipes::resnet_eval_options(6));
  std::size_t n = 0;
  while (eval.next(b)) n += b.size();
  CHECK(n == 20);  // one pass, last batch (2) kept

  recipes::TutorialTrainT<ImageSetSource> tut(src, recipes::tutorial_train_options(1, 4));
  CHECK(tut.output_geometry() == ImageGeometry{24, 24, 3});
  REQUIRE(tut.next(b));
  for (std::size_t i = 0; i < 4; ++i) {  // standardized: mean 0, stddev 1 per image
    double s = 0, sq = 0;
    for (std::size_t k = 0; k < 24 * 24 * 3; ++k) {
      const double v = b.images.data()[i * 1728 + k];
      s += v;
      sq += v * v;
    }
    CHECK(s / 1728 == Approx(0).margin(1e-4));
    CHECK(sq / 1728 == Approx(1).epsilon(1e-3));
  }

  recipes::TutorialEvalT<ImageSetSource> tev(src, recipes::tutorial_eval_options(4));
  REQUIRE(tev.next(b));
  Image img, crop;
  decode_chw_to_hwc(src->images().image(0), src->geometry(), img);
  resize_image_with_crop_or_pad(img, 24, 24, crop);
  per_image_standardization(crop);
  CHECK(std::equal(crop.data.begin(), crop.data.end(), b.images.data()));
}

TEST_CASE(
    "TFRecord and binary sources give the same batches, and a bad Example fails in the worker with its "
    "offset",
    "[data][pipeline][sources]") {
  TempDir dir;
  const ImageSet set = synthetic_set(12);
  write_cifar_tfrecords(set, dir.file("train.tfrecords"));
  auto o = recipes::resnet_train_options(3, 5);
  recipes::ResNetTrainT<ImageSetSource> bin(ImageSetSource(set), o);
  recipes::ResNetTrainT<TfRecordSource> rec(TfRecordSource(dir.str(), Split::train), o);
  CHECK(rec.examples_per_epoch() == 12);
  require_same(take(rec, 6), take(bin, 6));

  // an Example whose image has the wrong size: framing is fine, so the
  // source loads, and the worker that parses it reports file and offset
  {
    TfRecordWriter w(dir.file("validation.tfrecords"));
    const std::vector<std::uint8_t> img(3072, 1);
    w.write(encode_cifar_example(img.data(), img.size(), 1));
    w.write(encode_cifar_example(img.data(), 100, 1));
    w.close();
  }
  const std::uint64_t second = 16 + encode_cifar_example(set.image(0), 3072, 1).size() + 12;
  Pipeline<TfRecordSource> bad(TfRecordSource(dir.str(), Split::validation), opts(2, ShuffleMode::none, 1));
  Batch b;
  require_throws_with<DataError>(
      [&] { bad.next(b); }, {"validation.tfrecords", "byte offset " + std::to_string(second), "100 bytes"});
  CHECK(TfRecordSource::split_files("d", Split::train_all) ==
        std::vector<std::string>{"d/train.tfrecords", "d/validation.tfrecords"});
}

TEST_CASE("Cifar10Binary and Cifar100Binary sources count their examples from the files", "[data][sources]") {
  TempDir dir;
  cifarnet_test::write_cifar10_dir(dir, 3);
  Cifar10Binary train(dir.str(), Split::train);
  CHECK(train.size() == 12);
  CHECK(train.num_classes() == 10);
  std::vector<float> img(3072);
  CHECK(train.decode(4, img.data()) == (3 + 1) % 10);
  CHECK(img[1] == float(cifarnet_test::pattern_byte(4, 1024)));  // pixel (0,0) green
  cifarnet_test::write_bytes(dir.file("train.bin"), cifarnet_test::cifar100_records({4, 5}, {40, 50}));
  Cifar100Binary fine(dir.str(), Split::train), coarse(dir.str(), Split::train, true);
  CHECK(fine.decode(1, img.data()) == 50);
  CHECK(coarse.decode(1, img.data()) == 5);
  CHECK(coarse.num_classes() == 20);
}

TEST_CASE("augment = false skips the transforms: the batches of the plain pipeline, in the same order",
          "[data][pipeline][recipes]") {
  const auto src = std::make_shared<const ImageSetSource>(synthetic_set(30));
  auto o = recipes::resnet_train_options(7, 4);
  o.shuffle_buffer = 10;
  recipes::ResNetTrainT<ImageSetSource> augmented(src, o);
  o.augment = false;
  recipes::ResNetTrainT<ImageSetSource> switched_off(src, o);
  recipes::ResNetEvalT<ImageSetSource> plain(src, o);  // no transforms at all
  CHECK(switched_off.output_geometry() == plain.output_geometry());
  const auto expected = take(plain, 9);
  const auto off = take(switched_off, 9);
  require_same(off, expected);
  // The switch changes the pixels, not the stream (so positions stay valid).
  const auto on = take(augmented, 9);
  bool differs = false;
  for (std::size_t i = 0; i < on.size(); ++i) {
    CHECK(on[i].labels == off[i].labels);
    differs = differs || !std::equal(on[i].images.begin(), on[i].images.end(), off[i].images.begin());
  }
  CHECK(differs);
  CHECK(switched_off.position() == plain.position());
}

TEST_CASE("augment = false with transforms that change the image size is a ConfigError",
          "[data][pipeline][errors]") {
  const auto src = std::make_shared<const ImageSetSource>(synthetic_set(4));
  auto o = recipes::tutorial_train_options(1, 2);
  o.augment = false;
  require_throws_with<ConfigError>([&] { recipes::TutorialTrainT<ImageSetSource> p(src, o); },
                                   {"augment = false: the transforms turn 32x32x3 images into 24x24x3"});
}

TEST_CASE("reseed(s) restarts the stream as a pipeline built with seed s, through the BatchStream interface",
          "[data][pipeline][resume]") {
  const auto src = std::make_shared<const ImageSetSource>(synthetic_set(30));
  auto o = recipes::resnet_train_options(3, 4);
  o.shuffle_buffer = 10;
  recipes::ResNetTrainT<ImageSetSource> a(src, o);
  take(a, 5);
  BatchStream& stream = a;
  stream.reseed(99);
  CHECK(stream.position().batches == 0);
  o.seed = 99;
  recipes::ResNetTrainT<ImageSetSource> b(src, o);
  CHECK(a.position() == b.position());
  require_same(take(a, 6), take(b, 6));
  // A position saved before the reseed belongs to another stream now.
  o.seed = 3;
  recipes::ResNetTrainT<ImageSetSource> old(src, o);
  take(old, 2);
  CHECK_THROWS_AS(stream.restore(old.position()), ConfigError);
}
