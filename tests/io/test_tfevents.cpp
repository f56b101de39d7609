#include <catch2/catch.hpp>

#include <cifarnet/io/tfevents.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "io_test_util.hpp"
#include "png_decode.hpp"

using namespace cifarnet;
using namespace cifarnet::io;
using Catch::Matchers::Contains;

namespace {

const std::string kGolden = std::string(CIFARNET_TEST_DATA_DIR) + "/io/golden_events.tfevents";
const std::string kTbWriter = "tensorboard.summary.writer.event_file_writer";

/// The values make_golden_events.py histograms.
std::vector<float> hist_values() {
  std::vector<float> v;
  for (int i = 0; i < 1000; ++i) v.push_back(float(i - 500) * 0.0625f);
  for (float x : {1e-13f, -1e-13f, 1e30f, -1e30f, 3.0e38f, 0.0f, 0.0f}) v.push_back(x);
  return v;
}
std::uint8_t rgb_pixel(int y, int x, int c) { return std::uint8_t((y * 50 + x * 20 + c * 7) % 256); }
std::uint8_t gray_pixel(int y, int x) { return std::uint8_t((y * 90 + x * 40) % 256); }

SummaryValue scalar(const std::string& tag, float v) {
  SummaryValue s;
  s.tag = tag;
  s.value = v;
  return s;
}

}  // namespace

TEST_CASE("cifarnet's reader parses the golden file written by TensorBoard and TensorFlow",
          "[io][tfevents][golden]") {
  const auto ev = read_events(kGolden);
  REQUIRE(ev.size() == 9);
  CHECK(ev[0].file_version == "brain.Event:2");
  CHECK(ev[0].source_writer == kTbWriter);
  CHECK(ev[0].wall_time == 1700000000.25);
  CHECK_FALSE(ev[0].summary);

  REQUIRE(ev[1].summary);
  CHECK(ev[1].wall_time == 1700000001.5);
  CHECK(ev[1].step == 10);
  REQUIRE(ev[1].summary->size() == 1);
  CHECK((*ev[1].summary)[0].tag == "loss");
  CHECK((*ev[1].summary)[0].scalar() == 2.302585f);
  REQUIRE(ev[2].summary->size() == 2);
  CHECK(ev[2].step == 0);
  CHECK((*ev[2].summary)[0].scalar() == 0.1f);
  CHECK((*ev[2].summary)[1].tag == "accuracy");
  CHECK((*ev[2].summary)[1].is_scalar());
  CHECK((*ev[2].summary)[1].scalar() == 0.0f);
  CHECK(ev[3].step == -5);
  CHECK(ev[4].step == (std::int64_t(1) << 40));
  CHECK((*ev[4].summary)[0].scalar() == 1e30f);

  // TF's histogram of the same values
  const auto& hv = (*ev[5].summary)[0];
  CHECK(hv.tag == "weights");
  REQUIRE(hv.is_histogram());
  const auto& h = hv.histogram();
  const auto vals = hist_values();
  double sum = 0, sum_sq = 0;
  for (float f : vals) {
    sum += double(f);
    sum_sq += double(f) * double(f);
  }
  CHECK(h.num == 1007);
  CHECK(h.min == double(-1e30f));
  CHECK(h.max == double(3.0e38f));
  CHECK(h.sum == sum);
  CHECK(h.sum_squares == sum_sq);
  REQUIRE(h.bucket.size() == h.bucket_limit.size());
  double count = 0;
  for (double b : h.bucket) count += b;
  CHECK(count == 1007);
  for (double lim : h.bucket_limit)  // every edge is one of TF's default limits
    CHECK(std::binary_search(Histogram::default_limits().begin(), Histogram::default_limits().end(), lim));
  // and recomputing gives exactly TF's proto
  Histogram mine;
  for (float f : vals) mine.add(double(f));
  CHECK(mine.encode() == h);

  const auto& empty = (*ev[6].summary)[0].histogram();
  CHECK(empty.num == 0);
  CHECK(empty.min == DBL_MAX);
  CHECK(empty.max == -DBL_MAX);
  CHECK(empty.bucket_limit == std::vector<double>{DBL_MAX});
  CHECK(empty.bucket == std::vector<double>{0.0});

  // TF-encoded PNGs decode to the pixels of the script's formula
  const auto& rgb = (*ev[7].summary)[0];
  CHECK(rgb.tag == "sample/image");
  REQUIRE(rgb.is_image());
  CHECK(rgb.image().height == 5);
  CHECK(rgb.image().width == 4);
  CHECK(rgb.image().colorspace == 3);
  const auto im = iotest::decode_png(rgb.image().encoded);
  REQUIRE(im.channels == 3);
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 4; ++x)
      for (int c = 0; c < 3; ++c) CHECK(im.pixels[std::size_t((y * 4 + x) * 3 + c)] == rgb_pixel(y, x, c));
  const auto& gray = (*ev[8].summary)[0].image();
  CHECK(gray.colorspace == 1);
  const auto g = iotest::decode_png(gray.encoded);
  REQUIRE(g.channels == 1);
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 2; ++x) CHECK(g.pixels[std::size_t(y * 2 + x)] == gray_pixel(y, x));
}

TEST_CASE("EventWriter writes TensorBoard's bytes for the same events", "[io][tfevents][golden]") {
  const auto golden = iotest::read_bytes(kGolden);
  const auto ev = read_events(kGolden);
  iotest::TempDir dir;
  double now = 1700000000.25;
  EventWriterOptions o;
  o.clock = [&] { return now; };
  o.hostname = "vm";
  o.source_writer = kTbWriter;
  std::string path;
  {
    EventWriter w(dir.path(), o);
    path = w.path();
    now = 1700000001.5;
    w.add_scalar("loss", 2.302585, 10);
    now = 1700000002.0;
    w.add_summary({scalar("learning_rate", 0.1f), scalar("accuracy", 0.0f)}, 0);
    now = 1700000003.25;
    w.add_scalar("negative_step", -1.5, -5);
    now = 1700000004.125;
    w.add_scalar("big_step", 1e30, std::int64_t(1) << 40);
    now = 1700000005.0;
    w.add_histogram("weights", hist_values(), 20);
    now = 1700000006.0;
    w.add_histogram("empty", std::vector<float>{}, 21);
    // the PNG bytes are TF's (encoders differ); the Image message around them is ours
    now = 1700000007.0;
    w.add_image_encoded("sample/image", (*ev[7].summary)[0].image().encoded, 5, 4, 3, 30);
    now = 1700000008.0;
    w.add_image_encoded("gray/image", (*ev[8].summary)[0].image().encoded, 3, 2, 1, 31);
  }  // destruction flushes
  CHECK(path == dir.path() + "/events.out.tfevents.1700000000.vm");
  const auto mine = iotest::read_bytes(path);
  CHECK(mine.size() == golden.size());
  CHECK(mine == golden);
  // and re-encoding every parsed event reproduces each record's payload
  RecordReader rr(kGolden);
  std::size_t i = 0;
  while (auto rec = rr.next()) CHECK(encode_event(ev[i++]) == rec->data);
  CHECK(i == ev.size());
}

TEST_CASE("EventWriter images are PNGs that decode to the pixels given", "[io][tfevents]") {
  iotest::TempDir dir;
  std::vector<std::uint8_t> px(5 * 4 * 3);
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 4; ++x)
      for (int c = 0; c < 3; ++c) px[std::size_t((y * 4 + x) * 3 + c)] = rgb_pixel(y, x, c);
  std::string path;
  {
    EventWriter w(dir.path());
    path = w.path();
    w.add_image("out/0", px.data(), 5, 4, 3, 7);
  }
  const auto ev = read_events(path);
  REQUIRE(ev.size() == 2);
  CHECK(ev[0].source_writer == "cifarnet");
  const auto& im = (*ev[1].summary)[0].image();
  CHECK(im.height == 5);
  CHECK(im.width == 4);
  CHECK(im.colorspace == 3);
  CHECK(iotest::decode_png(im.encoded).pixels == px);
}

TEST_CASE("EventWriter names files events.out.tfevents.<time>.<host> and never overwrites one",
          "[io][tfevents]") {
  iotest::TempDir dir;
  EventWriterOptions o;
  o.clock = [] { return 1234.9; };
  o.hostname = "node7";
  EventWriter a(dir / "logs", o);
  EventWriter b(dir / "logs", o);
  o.filename_suffix = ".v2";
  EventWriter c(dir / "logs", o);
  CHECK(a.path() == dir / "logs/events.out.tfevents.0000001234.node7");
  CHECK(b.path() == dir / "logs/events.out.tfevents.0000001234.node7.1");
  CHECK(c.path() == dir / "logs/events.out.tfevents.0000001234.node7.v2");
}

TEST_CASE("EventWriter flushes every max_queue events, every flush_secs, and on destruction",
          "[io][tfevents]") {
  iotest::TempDir dir;
  double now = 100.0;
  EventWriterOptions o;
  o.clock = [&] { return now; };
  o.max_queue = 3;
  o.flush_secs = 5;
  std::string path;
  {
    EventWriter w(dir.path(), o);
    path = w.path();
    CHECK(read_events(path).size() == 1);  // the file_version event is flushed at once
    w.add_scalar("a", 1, 1);
    w.add_scalar("a", 2, 2);
    CHECK(read_events(path).size() == 1);  // two pending
    w.add_scalar("a", 3, 3);
    CHECK(read_events(path).size() == 4);  // third one: queue full
    w.add_scalar("a", 4, 4);
    CHECK(read_events(path).size() == 4);
    now += 5.0;
    w.add_scalar("a", 5, 5);
    CHECK(read_events(path).size() == 6);  // flush_secs passed
    w.add_scalar("a", 6, 6);
    w.flush();
    CHECK(read_events(path).size() == 7);
    w.add_scalar("a", 7, 7);
  }
  const auto ev = read_events(path);
  REQUIRE(ev.size() == 8);
  CHECK((*ev[7].summary)[0].scalar() == 7.0f);
  CHECK(ev[7].wall_time == 105.0);
}

TEST_CASE("histograms refuse NaN and Inf like tf.summary.histogram", "[io][tfevents][errors]") {
  iotest::TempDir dir;
  EventWriter w(dir.path());
  const std::vector<float> bad = {1.0f, std::nanf(""), 2.0f};
  CHECK(iotest::message_of<NumericsError>([&] { w.add_histogram("conv1/weights", bad, 3); }) ==
        "cifarnet: NaN or Inf in summary histogram for: conv1/weights (value nan at index 1)");
  const std::vector<double> inf = {INFINITY};
  CHECK(iotest::message_of<NumericsError>([&] { w.add_histogram("g", inf, 3); }) ==
        "cifarnet: NaN or Inf in summary histogram for: g (value inf at index 0)");
}

TEST_CASE("Histogram keeps TF's default limits and bucket rule", "[io][tfevents]") {
  const auto& lim = Histogram::default_limits();
  REQUIRE(lim.size() % 2 == 1);
  const std::size_t zero = lim.size() / 2;
  CHECK(lim[zero] == 0.0);
  CHECK(lim[zero + 1] == 1e-12);
  CHECK(lim.back() == DBL_MAX);
  CHECK(lim.front() == -DBL_MAX);
  for (std::size_t i = 1; i < lim.size(); ++i) CHECK(lim[i - 1] < lim[i]);
  for (std::size_t i = 0; i < zero; ++i) CHECK(lim[i] == -lim[lim.size() - 1 - i]);
  Histogram h;
  h.add(0.0);      // first limit greater than 0 is 1e-12
  h.add(1e-12);    // equal to a limit: goes to the next bucket
  h.add(DBL_MAX);  // TF would index past the end here; cifarnet keeps it in the last bucket
  const auto p = h.encode(/*preserve_zero_buckets=*/true);
  CHECK(p.bucket.size() == lim.size());
  CHECK(p.bucket[zero + 1] == 1);
  CHECK(p.bucket[zero + 2] == 1);
  CHECK(p.bucket.back() == 1);
  CHECK(iotest::message_of<ConfigError>([] {
          Histogram({1.0, 1.0});
        }) == "cifarnet: Histogram: bucket limits must be strictly increasing");
}

TEST_CASE("corrupt event files are DataErrors naming the file and the record's offset",
          "[io][tfevents][errors]") {
  iotest::TempDir dir;
  const auto good = iotest::read_bytes(kGolden);
  const std::string p = dir / "bad.tfevents";
  auto err = [&](const std::vector<std::uint8_t>& b) {
    iotest::write_bytes(p, b);
    return iotest::message_of<DataError>([&] { read_events(p); });
  };
  // record 0 is 12 + len0 + 4 bytes
  std::uint64_t len0 = 0;
  for (int i = 7; i >= 0; --i) len0 = (len0 << 8) | good[std::size_t(i)];
  const std::uint64_t rec1 = 16 + len0;
  const std::string at = "cifarnet: file '" + p + "' at byte offset ";

  SECTION("truncated inside a record's data") {
    auto b = good;
    b.resize(rec1 + 20);
    CHECK_THAT(err(b), Contains(at + std::to_string(rec1) + ": truncated record: payload of "));
  }
  SECTION("truncated inside a record header") {
    auto b = good;
    b.resize(rec1 + 5);
    CHECK(err(b) == at + std::to_string(rec1) + ": truncated record header (5 of 12 bytes)");
  }
  SECTION("a corrupt length") {
    auto b = good;
    b[rec1 + 1] ^= 1;
    CHECK_THAT(err(b), Contains(at + std::to_string(rec1) + ": corrupt record length (CRC mismatch)"));
  }
  SECTION("a corrupt payload") {
    auto b = good;
    b[rec1 + 14] ^= 0x80;
    CHECK_THAT(err(b), Contains(at + std::to_string(rec1 + 12) + ": corrupt record payload of "));
  }
  SECTION("a well-framed record that is not an Event") {
    std::string bytes;
    frame_record(bytes, std::string("\x0a\x05\x01", 3));  // field 1 wire 2: length 5, 1 byte left
    CHECK(err(std::vector<std::uint8_t>(bytes.begin(), bytes.end())) ==
          at + "12: Event: wall_time has wire type 2, expected 1");
    std::string trunc;
    frame_record(trunc, std::string("\x2a\x05\x01", 3));  // summary, length 5, 1 byte left
    CHECK(err(std::vector<std::uint8_t>(trunc.begin(), trunc.end())) ==
          at + "13: Event: length 5 runs past the end of the message (1 bytes left)");
  }
}

TEST_CASE("event encoding follows proto3: defaults omitted, oneof zeros kept, negative steps 10 bytes",
          "[io][tfevents]") {
  Event e;
  CHECK(encode_event(e).empty());
  e.step = -1;
  CHECK(encode_event(e) == std::string("\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11));
  Event z;
  z.summary = std::vector<SummaryValue>{scalar("", 0.0f)};
  CHECK(encode_event(z) == std::string("\x2a\x07\x0a\x05\x15\x00\x00\x00\x00", 9));
  HistogramProto h;
  h.min = -0.0;  // bitwise non-zero: written, as libprotobuf does
  SummaryValue v;
  v.tag = "h";
  v.value = h;
  Event he;
  he.summary = std::vector<SummaryValue>{v};
  const auto bytes = encode_event(he);
  CHECK(bytes == std::string("\x2a\x10\x0a\x0e\x0a\x01h\x2a\x09\x09\x00\x00\x00\x00\x00\x00\x00\x80", 18));
  const auto back = decode_event(bytes, "mem", 0);
  CHECK(std::signbit((*back.summary)[0].histogram().min));
}

TEST_CASE("a SessionLog START round-trips and is encoded as TensorBoard's field 7 {status: 1}",
          "[io][tfevents]") {
  iotest::TempDir dir;
  std::string path;
  {
    io::EventWriter w(dir.path());
    path = w.path();
    w.add_scalar("loss", 1.0, 110);
    w.add_session_start(100, "model.ckpt-100.safetensors");
  }
  const auto ev = io::read_events(path);
  REQUIRE(ev.size() == 3);
  CHECK_FALSE(ev[1].session_log);
  REQUIRE(ev[2].session_log);
  CHECK(ev[2].step == 100);
  CHECK(ev[2].session_log->status == io::SessionLog::kStart);
  CHECK(ev[2].session_log->checkpoint_path == "model.ckpt-100.safetensors");
  io::Event e;
  e.step = 5;
  e.session_log = io::SessionLog{io::SessionLog::kStart, "", ""};
  const std::string bytes = io::encode_event(e);
  CHECK(bytes.find(std::string("\x3a\x02\x08\x01", 4)) != std::string::npos);
  CHECK(io::decode_event(bytes, "<mem>", 0).session_log->status == io::SessionLog::kStart);
}
