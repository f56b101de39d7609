#include <catch2/catch.hpp>

#include <cifarnet/io/checkpoint.hpp>

#include <xtensor/xarray.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <csignal>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "io_test_util.hpp"

using namespace cifarnet;
using namespace cifarnet::io;
using Catch::Matchers::Contains;

namespace {

StateDict small_dict(std::int64_t step, std::size_t n = 16) {
  StateDict d;
  std::vector<float> w(n);
  for (std::size_t i = 0; i < n; ++i) w[i] = float(step) + 0.5f * float(i);
  d.set<float>("w", {n}, w);
  set_global_step(d, step);
  return d;
}

std::string index_text(const std::string& dir) {
  const auto b = iotest::read_bytes(dir + "/checkpoint");
  return std::string(b.begin(), b.end());
}

/// A small arena: two trainable tensors and one BN-style state buffer.
Parameters<float> make_params(std::uint64_t seed) {
  Parameters<float> p;
  p.add({"conv1/weights", {3, 3, 2, 4}, true, Initializer::truncated_normal(0.05)});
  p.add({"conv1/biases", {4}, true, Initializer::constant(0.1)});
  p.add({"bn/moving_mean", {4}, false, Initializer::uniform(-1, 1)});
  p.allocate();
  Rng rng(seed);
  p.initialize(rng);
  return p;
}

std::vector<float> values_of(const Parameters<float>& p, const std::string& name) {
  const auto id = p.id(name);
  return std::vector<float>(p.value(id), p.value(id) + p.info(id).size);
}

}  // namespace

TEST_CASE("CheckpointManager writes model.ckpt-<step>.safetensors and a TF-style index", "[io][checkpoint]") {
  iotest::TempDir dir;
  const std::string ckdir = dir / "run";  // created by the manager
  CheckpointManager m(ckdir);
  CHECK_FALSE(m.latest());
  CHECK_FALSE(m.restore_latest());
  CHECK(m.save(100, small_dict(100)) == ckdir + "/model.ckpt-100.safetensors");
  m.save(200, small_dict(200));
  CHECK(iotest::list_dir(ckdir) ==
        std::vector<std::string>{"checkpoint", "model.ckpt-100.safetensors", "model.ckpt-200.safetensors"});
  CHECK(index_text(ckdir) ==
        "model_checkpoint_path: \"model.ckpt-200.safetensors\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-100.safetensors\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-200.safetensors\"\n");
  CHECK(m.latest() == ckdir + "/model.ckpt-200.safetensors");
  CHECK(latest_checkpoint(ckdir) == ckdir + "/model.ckpt-200.safetensors");
  CHECK_FALSE(latest_checkpoint(dir / "nothing-here"));

  const auto r = m.restore_latest();
  REQUIRE(r);
  CHECK(r->checkpoint.step == 200);
  CHECK(r->warnings.empty());
  CHECK(global_step(r->dict) == 200);
  CHECK(r->dict.at("w").values<float>() == small_dict(200).at("w").values<float>());

  // a new manager on the same directory continues from the index
  CheckpointManager again(ckdir);
  REQUIRE(again.checkpoints().size() == 2);
  CHECK(again.checkpoints()[0].step == 100);
  CHECK(again.checkpoints()[1].step == 200);
  CHECK(again.warnings().empty());
}

TEST_CASE("CheckpointManager keeps the last max_to_keep checkpoints, across restarts", "[io][checkpoint]") {
  iotest::TempDir dir;
  {
    CheckpointManager m(dir.path(), 2);
    for (int s = 1; s <= 4; ++s) m.save(s * 10, small_dict(s * 10));
  }
  CHECK(iotest::list_dir(dir.path()) ==
        std::vector<std::string>{"checkpoint", "model.ckpt-30.safetensors", "model.ckpt-40.safetensors"});
  CheckpointManager m(dir.path(), 2);
  m.save(50, small_dict(50));
  CHECK(iotest::list_dir(dir.path()) ==
        std::vector<std::string>{"checkpoint", "model.ckpt-40.safetensors", "model.ckpt-50.safetensors"});
  CHECK(index_text(dir.path()) ==
        "model_checkpoint_path: \"model.ckpt-50.safetensors\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-40.safetensors\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-50.safetensors\"\n");
  // saving the same step again replaces it without duplicating the entry
  m.save(50, small_dict(51));
  CHECK(m.checkpoints().size() == 2);
  CHECK(read_safetensors(*m.latest()).at("w").values<float>()[0] == 51.0f);

  SECTION("max_to_keep 0 keeps everything") {
    iotest::TempDir all;
    CheckpointOptions o;
    o.max_to_keep = 0;
    o.prefix = "net";
    CheckpointManager k(all.path(), o);
    for (int s = 0; s < 7; ++s) k.save(s, small_dict(s));
    CHECK(k.checkpoints().size() == 7);
    CHECK(iotest::list_dir(all.path()).size() == 8);
    CHECK(k.latest() == all.path() + "/net-6.safetensors");
  }
}

TEST_CASE("restore_latest falls back to the previous checkpoint when the newest is corrupt",
          "[io][checkpoint][errors]") {
  iotest::TempDir dir;
  CheckpointManager m(dir.path());
  m.save(1, small_dict(1));
  m.save(2, small_dict(2));
  const std::string newest = dir / "model.ckpt-2.safetensors";

  SECTION("a flipped bit in the data") {
    auto b = iotest::read_bytes(newest);
    b[b.size() - 3] ^= 0x04;
    iotest::write_bytes(newest, b);
    const auto r = m.restore_latest();
    REQUIRE(r);
    CHECK(r->checkpoint.step == 1);
    CHECK(global_step(r->dict) == 1);
    REQUIRE(r->warnings.size() == 1);
    CHECK_THAT(r->warnings[0], Contains("skipping checkpoint '" + newest + "' (step 2): cifarnet: file '" +
                                        newest + "' at byte offset "));
    CHECK_THAT(r->warnings[0], Contains("CRC-32C mismatch in tensor 'w'"));
  }
  SECTION("a truncated file") {
    auto b = iotest::read_bytes(newest);
    b.resize(b.size() / 2);
    iotest::write_bytes(newest, b);
    const auto r = m.restore_latest();
    REQUIRE(r);
    CHECK(r->checkpoint.step == 1);
    REQUIRE(r->warnings.size() == 1);
    CHECK_THAT(r->warnings[0], Contains("skipping checkpoint '" + newest + "' (step 2)"));
  }
  SECTION("a deleted file") {
    std::filesystem::remove(newest);
    const auto r = m.restore_latest();
    REQUIRE(r);
    CHECK(r->checkpoint.step == 1);
    CHECK(r->warnings ==
          std::vector<std::string>{"skipping checkpoint '" + newest + "' (step 2): cifarnet: cannot open '" +
                                   newest + "': No such file or directory"});
  }
  SECTION("every checkpoint corrupt") {
    iotest::write_bytes(newest, {1, 2, 3});
    iotest::write_bytes(dir / "model.ckpt-1.safetensors", {});
    const auto msg = iotest::message_of<DataError>([&] { m.restore_latest(); });
    CHECK_THAT(msg, Contains("cifarnet: no readable checkpoint in '" + dir.path() +
                             "':\n  skipping checkpoint '" + newest + "' (step 2): "));
    CHECK_THAT(msg,
               Contains("\n  skipping checkpoint '" + dir.path() + "/model.ckpt-1.safetensors' (step 1): "));
  }
}

TEST_CASE("a missing or corrupt index falls back to the checkpoint files in the directory",
          "[io][checkpoint]") {
  iotest::TempDir dir;
  {
    CheckpointManager m(dir.path());
    m.save(5, small_dict(5));
    m.save(12, small_dict(12));
  }
  SECTION("index removed") {
    std::filesystem::remove(dir / "checkpoint");
    CheckpointManager m(dir.path());
    CHECK(m.latest() == dir / "model.ckpt-12.safetensors");
    CHECK(m.warnings().empty());
  }
  SECTION("index corrupt") {
    iotest::write_bytes(dir / "checkpoint", {'g', 'a', 'r', 'b', 'a', 'g', 'e', '\n'});
    CheckpointManager m(dir.path());
    CHECK(m.latest() == dir / "model.ckpt-12.safetensors");
    REQUIRE(m.warnings().size() == 1);
    CHECK(m.warnings()[0] ==
          "ignoring the checkpoint index: cifarnet: file '" + dir / "checkpoint" +
              "' at byte offset 0: line 1 is not 'model_checkpoint_path: \"...\"' or "
              "'all_model_checkpoint_paths: \"...\"': garbage; using the checkpoint files in "
              "the directory instead");
  }
  SECTION("the index format parses what it formats, quotes included") {
    CheckpointIndex idx{"a\"b.safetensors", {"x\\y", "a\"b.safetensors"}};
    const auto text = format_checkpoint_index(idx);
    CHECK(text ==
          "model_checkpoint_path: \"a\\\"b.safetensors\"\n"
          "all_model_checkpoint_paths: \"x\\\\y\"\n"
          "all_model_checkpoint_paths: \"a\\\"b.safetensors\"\n");
    const auto back = parse_checkpoint_index(text, "idx");
    CHECK(back.latest == idx.latest);
    CHECK(back.all == idx.all);
    CHECK(iotest::message_of<DataError>(
              [] { parse_checkpoint_index("model_checkpoint_path: \"x\n", "idx"); }) ==
          "cifarnet: file 'idx' at byte offset 0: line 1 is not 'model_checkpoint_path: \"...\"' or "
          "'all_model_checkpoint_paths: \"...\"': model_checkpoint_path: \"x");
  }
}

namespace {

/// Runs f() in a child process whose files may not grow beyond `limit`
/// bytes (SIGXFSZ ignored, so writes fail with EFBIG). Returns the child's
/// status (0: f threw CheckpointSaveError, 1: nothing thrown, 2: another exception) and
/// the exception's message.
template <class F>
std::pair<int, std::string> with_file_size_limit(rlim_t limit, F&& f) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim {
      limit, limit
    };
    ::setrlimit(RLIMIT_FSIZE, &lim);
    int code = 1;
    std::string msg = "no exception";
    try {
      f();
    } catch (const CheckpointSaveError& e) {
      code = 0;
      msg = e.what();
    } catch (const std::exception& e) {
      code = 2;
      msg = e.what();
    }
    (void)!::write(fds[1], msg.data(), msg.size());
    ::close(fds[1]);
    ::_exit(code);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) msg.append(buf, std::size_t(n));
  ::close(fds[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  return {WEXITSTATUS(status), msg};
}

/// A checkpoint-like dict: parameters, a slot, the step and an RNG state.
StateDict training_dict(std::int64_t step) {
  StateDict d;
  const auto p = make_params(std::uint64_t(step));
  add_parameters(d, p);
  std::vector<float> slot(4, 0.25f * float(step));
  d.set<float>("conv1/biases/Momentum", {4}, slot);
  set_global_step(d, step);
  set_rng_state(d, "data", Rng(std::uint64_t(step)).state());
  d.metadata["pipeline/train"] = "epoch 0 offset " + std::to_string(step);
  return d;
}

/// A process id that is certainly not running (a child that has exited).
pid_t dead_pid() {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) ::_exit(0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return pid;
}

}  // namespace

TEST_CASE("a write that fails (file size limit) leaves the previous checkpoint intact and no temporary file",
          "[io][checkpoint][errors][atomic]") {
  iotest::TempDir dir;
  CheckpointManager m(dir.path());
  m.save(1, small_dict(1));
  const auto before_ckpt = iotest::read_bytes(dir / "model.ckpt-1.safetensors");
  const auto before_index = iotest::read_bytes(dir / "checkpoint");

  // writes beyond 4 KiB fail with EFBIG
  const auto [code, msg] = with_file_size_limit(4096, [&] {
    CheckpointManager child(dir.path());
    child.save(2, small_dict(2, 100000));  // 400 KB
  });
  INFO("child: " << msg);
  CHECK(code == 0);
  const std::string target = dir / "model.ckpt-2.safetensors";
  CHECK_THAT(msg, Contains("cifarnet: cannot write '" + target + "' (temporary file '" + dir.path() +
                           "/.model.ckpt-2.safetensors.tmp-"));
  CHECK_THAT(msg, Contains("): write failed after 4096 bytes: File too large"));

  // nothing but the previous checkpoint and its index
  CHECK(iotest::list_dir(dir.path()) == std::vector<std::string>{"checkpoint", "model.ckpt-1.safetensors"});
  CHECK(iotest::read_bytes(dir / "model.ckpt-1.safetensors") == before_ckpt);
  CHECK(iotest::read_bytes(dir / "checkpoint") == before_index);
  const auto r = CheckpointManager(dir.path()).restore_latest();
  REQUIRE(r);
  CHECK(r->checkpoint.step == 1);
  CHECK(r->warnings.empty());
}

TEST_CASE("atomic writes into a missing directory are IoErrors naming the file", "[io][checkpoint][errors]") {
  iotest::TempDir dir;
  const std::string p = dir / "no/such/dir/x.safetensors";
  CHECK_THAT(iotest::message_of<IoError>([&] { write_safetensors(p, small_dict(1)); }),
             Contains("cifarnet: cannot write '" + p + "': cannot create temporary file '" + dir.path() +
                      "/no/such/dir/.x.safetensors.tmp-"));
  CHECK(iotest::list_dir(dir.path()).empty());
}

TEST_CASE("global step and RNG state round-trip through a checkpoint", "[io][checkpoint]") {
  iotest::TempDir dir;
  StateDict d;
  set_global_step(d, 123456789012LL);
  Rng rng(7);
  rng.next_u64();
  set_rng_state(d, "data", rng.state());
  d.metadata["pipeline/train"] = "epoch=3 position=1024";
  write_safetensors(dir / "s.safetensors", d);
  const auto r = read_safetensors(dir / "s.safetensors");
  CHECK(global_step(r) == 123456789012LL);
  CHECK(rng_state(r, "data") == rng.state());
  CHECK_FALSE(rng_state(r, "other"));
  CHECK(r.metadata.at("pipeline/train") == "epoch=3 position=1024");
  Rng resumed;
  resumed.set_state(*rng_state(r, "data"));
  CHECK(resumed.next_u64() == rng.next_u64());

  StateDict bad = r;
  bad.metadata["rng/data"] = "0123";
  CHECK(iotest::message_of<DataError>([&] { rng_state(bad, "data"); }) ==
        "cifarnet: '" + dir / "s.safetensors" +
            "': metadata 'rng/data' = '0123' is not four 16-digit lowercase hex "
            "words");
  bad.set<float>("global_step", {}, {1.0f});
  CHECK(iotest::message_of<DataError>([&] { global_step(bad); }) ==
        "cifarnet: '" + dir / "s.safetensors" + "': global_step is F32 of shape [], expected an I64 scalar");
}

TEST_CASE("parameters save and restore bit for bit, and strict loads name what is missing or misshapen",
          "[io][checkpoint][params]") {
  iotest::TempDir dir;
  auto a = make_params(1);
  StateDict d;
  add_parameters(d, a);
  set_global_step(d, 3);
  REQUIRE(d.size() == 4);
  CHECK(d.at("conv1/weights").shape == std::vector<std::size_t>{3, 3, 2, 4});
  CHECK(d.at("conv1/weights").dtype == Dtype::F32);
  CHECK(d.at("bn/moving_mean").values<float>() == values_of(a, "bn/moving_mean"));
  CheckpointManager m(dir.path());
  m.save(3, d);

  auto b = make_params(2);
  REQUIRE(values_of(b, "conv1/weights") != values_of(a, "conv1/weights"));
  // The checkpoint holds global_step besides the parameters: strict refuses
  // it unless the caller says the dict holds other state.
  CHECK(iotest::message_of<DataError>([&] { load_parameters(b, m.restore_latest()->dict); }) ==
        "cifarnet: '" + *m.latest() +
            "' has 1 unexpected tensor (no parameter has that name): 'global_step' [] (strict = false loads "
            "the "
            "rest and reports them)");
  LoadOptions with_step;
  with_step.other_state = {"global_step"};
  const auto rep = load_parameters(b, m.restore_latest()->dict, with_step);
  CHECK(rep.loaded.size() == 3);
  CHECK(rep.missing.empty());
  CHECK(rep.unexpected.empty());
  for (const auto& name : {"conv1/weights", "conv1/biases", "bn/moving_mean"})
    CHECK(values_of(b, name) == values_of(a, name));

  SECTION("strict: a missing parameter") {
    StateDict partial = read_safetensors(*m.latest());
    partial.erase("conv1/biases");
    partial.erase("bn/moving_mean");
    CHECK(iotest::message_of<DataError>([&] { load_parameters(b, partial, with_step); }) ==
          "cifarnet: '" + *m.latest() +
              "' is missing 2 parameters: 'conv1/biases' [4], 'bn/moving_mean' [4]");
    LoadOptions lenient;
    lenient.strict = false;
    const auto r = load_parameters(b, partial, lenient);
    CHECK(r.missing == std::vector<std::string>{"conv1/biases", "bn/moving_mean"});
    CHECK(r.unexpected == std::vector<std::string>{"global_step"});
    CHECK(r.loaded.size() == 1);
  }
  SECTION("a shape mismatch names the parameter and both shapes") {
    StateDict wrong;
    add_parameters(wrong, a);
    wrong.set<float>("conv1/biases", {2, 2}, {1, 2, 3, 4});
    CHECK(iotest::message_of<ShapeError>([&] { load_parameters(b, wrong); }) ==
          "cifarnet: parameter 'conv1/biases' has shape [4] but tensor 'conv1/biases' in state dict has "
          "shape [2, 2]");
  }
  SECTION("floating dtypes convert; others are refused") {
    StateDict dd;
    add_parameters(dd, a);
    dd.set<double>("conv1/biases", {4}, {1.0, 2.0, 3.0, 4.5});
    load_parameters(b, dd);
    CHECK(values_of(b, "conv1/biases") == std::vector<float>{1.0f, 2.0f, 3.0f, 4.5f});
    dd.set<std::int32_t>("conv1/biases", {4}, {1, 2, 3, 4});
    CHECK(iotest::message_of<DataError>([&] { load_parameters(b, dd); }) ==
          "cifarnet: parameter 'conv1/biases': tensor 'conv1/biases' in state dict has dtype I32, expected a "
          "floating type");
  }
  SECTION("a prefix on both sides") {
    StateDict pre;
    add_parameters(pre, a, "ema/");
    CHECK(pre.contains("ema/conv1/weights"));
    LoadOptions o;
    o.prefix = "ema/";
    auto c = make_params(9);
    load_parameters(c, pre, o);
    CHECK(values_of(c, "conv1/weights") == values_of(a, "conv1/weights"));
  }
  SECTION("a double arena writes F64") {
    Parameters<double> p;
    p.add({"x", {2}, true, Initializer::constant(0.25)});
    p.allocate();
    Rng rng(1);
    p.initialize(rng);
    StateDict dd;
    add_parameters(dd, p);
    CHECK(dd.at("x").dtype == Dtype::F64);
    CHECK(dd.at("x").values<double>() == std::vector<double>{0.25, 0.25});
  }
}

TEST_CASE("assign_from_checkpoint warm-starts a selected subset with shape checks",
          "[io][checkpoint][params]") {
  auto src = make_params(1);
  StateDict ckpt;
  add_parameters(ckpt, src);
  ckpt.source = "old.safetensors";

  SECTION("glob include and exclude") {
    auto p = make_params(2);
    const auto biases_before = values_of(p, "conv1/biases");
    WarmStartOptions o;
    o.include = {"conv1/*"};
    o.exclude = {"*/biases"};
    const auto r = assign_from_checkpoint(p, ckpt, o);
    CHECK(r.loaded == std::vector<std::pair<std::string, std::string>>{{"conv1/weights", "conv1/weights"}});
    CHECK(values_of(p, "conv1/weights") == values_of(src, "conv1/weights"));
    CHECK(values_of(p, "conv1/biases") == biases_before);
    CHECK(values_of(p, "bn/moving_mean") != values_of(src, "bn/moving_mean"));
  }
  SECTION("regex selection") {
    auto p = make_params(2);
    WarmStartOptions o;
    o.include = {NamePattern::regex("(conv1/biases|bn/.*)")};
    const auto r = assign_from_checkpoint(p, ckpt, o);
    CHECK(r.loaded.size() == 2);
    CHECK(values_of(p, "bn/moving_mean") == values_of(src, "bn/moving_mean"));
    CHECK(values_of(p, "conv1/weights") != values_of(src, "conv1/weights"));
    CHECK(iotest::message_of<ConfigError>([] {
            NamePattern::regex("(unclosed");
          }).rfind("cifarnet: invalid name regex '(unclosed': ", 0) == 0);
  }
  SECTION("names remapped by a prefix map") {
    StateDict old;
    add_parameters(old, src, "old_net/");
    Parameters<float> p;
    p.add({"net/conv1/weights", {3, 3, 2, 4}});
    p.add({"head/w", {2}});
    p.allocate();
    WarmStartOptions o;
    o.include = {"net/*"};
    o.prefix_map = {{"net/", "old_net/"}};
    const auto r = assign_from_checkpoint(p, old, o);
    CHECK(r.loaded ==
          std::vector<std::pair<std::string, std::string>>{{"net/conv1/weights", "old_net/conv1/weights"}});
    const auto id = p.id("net/conv1/weights");
    CHECK(std::vector<float>(p.value(id), p.value(id) + 72) == values_of(src, "conv1/weights"));
  }
  SECTION("missing variables: an error unless ignored") {
    Parameters<float> p;
    p.add({"conv1/weights", {3, 3, 2, 4}});
    p.add({"logits/weights", {4, 10}});
    p.allocate();
    WarmStartOptions o;
    CHECK(iotest::message_of<DataError>([&] { assign_from_checkpoint(p, ckpt, o); }) ==
          "cifarnet: warm start: 'old.safetensors' has no tensor 'logits/weights' for parameter "
          "'logits/weights' "
          "[4, 10] (set ignore_missing to skip it)");
    o.ignore_missing = true;
    const auto r = assign_from_checkpoint(p, ckpt, o);
    CHECK(r.missing == std::vector<std::string>{"logits/weights"});
    CHECK(r.loaded.size() == 1);
  }
  SECTION("a shape mismatch changes nothing and names both shapes") {
    Parameters<float> p;
    p.add({"conv1/biases", {4}, true, Initializer::constant(7)});
    p.add({"conv1/weights", {5, 5, 2, 4}, true, Initializer::constant(7)});
    p.allocate();
    Rng rng(1);
    p.initialize(rng);
    WarmStartOptions o;
    CHECK(iotest::message_of<ShapeError>([&] { assign_from_checkpoint(p, ckpt, o); }) ==
          "cifarnet: warm start: parameter 'conv1/weights' has shape [5, 5, 2, 4] but tensor 'conv1/weights' "
          "in "
          "'old.safetensors' has shape [3, 3, 2, 4]");
    CHECK(values_of(p, "conv1/biases") == std::vector<float>(4, 7.0f));  // not half-applied
  }
  SECTION("a selection that matches nothing is a configuration error") {
    auto p = make_params(2);
    WarmStartOptions o;
    o.include = {"resnet/*"};
    CHECK(iotest::message_of<ConfigError>([&] { assign_from_checkpoint(p, ckpt, o); }) ==
          "cifarnet: warm start: the include patterns [resnet/*] select no parameter");
  }
  SECTION("from a file") {
    iotest::TempDir dir;
    write_safetensors(dir / "old.safetensors", ckpt);
    auto p = make_params(2);
    WarmStartOptions o;
    o.include = {"bn/*"};
    assign_from_checkpoint(p, dir / "old.safetensors", o);
    CHECK(values_of(p, "bn/moving_mean") == values_of(src, "bn/moving_mean"));
  }
}

TEST_CASE("assign_from_values sets parameters from in-memory xarrays and vectors",
          "[io][checkpoint][params]") {
  auto p = make_params(3);
  SECTION("xt::xarray with the right shape") {
    std::map<std::string, xt::xarray<float>> v;
    v["conv1/biases"] = xt::xarray<float>{1.f, 2.f, 3.f, 4.f};
    xt::xarray<double> w = xt::zeros<double>({3, 3, 2, 4});
    w(2, 1, 0, 3) = 5.0;
    std::map<std::string, xt::xarray<double>> vw{{"conv1/weights", w}};
    CHECK(assign_from_values(p, v) == std::vector<std::string>{"conv1/biases"});
    assign_from_values(p, vw);
    CHECK(values_of(p, "conv1/biases") == std::vector<float>{1, 2, 3, 4});
    const auto got = values_of(p, "conv1/weights");
    CHECK(got[((2 * 3 + 1) * 2 + 0) * 4 + 3] == 5.0f);  // row-major HWIO
    CHECK(std::count(got.begin(), got.end(), 0.0f) == 71);
  }
  SECTION("xt::xarray with a wrong shape") {
    std::map<std::string, xt::xarray<float>> v{{"conv1/biases", xt::xarray<float>{{1.f, 2.f}, {3.f, 4.f}}}};
    CHECK(iotest::message_of<ShapeError>([&] { assign_from_values(p, v); }) ==
          "cifarnet: assign_from_values: parameter 'conv1/biases' has shape [4] but the value has shape [2, "
          "2]");
  }
  SECTION("flat vectors checked by element count") {
    std::map<std::string, std::vector<float>> v{{"bn/moving_mean", {9, 8, 7, 6}}};
    assign_from_values(p, v);
    CHECK(values_of(p, "bn/moving_mean") == std::vector<float>{9, 8, 7, 6});
    v["conv1/biases"] = {1, 2, 3};
    const auto before = values_of(p, "bn/moving_mean");
    v["bn/moving_mean"] = {0, 0, 0, 0};
    CHECK(iotest::message_of<ShapeError>([&] { assign_from_values(p, v); }) ==
          "cifarnet: assign_from_values: parameter 'conv1/biases' has shape [4] (4 elements) but the value "
          "has 3 "
          "elements");
    CHECK(values_of(p, "bn/moving_mean") == before);  // nothing applied
  }
  SECTION("unknown names") {
    std::map<std::string, std::vector<float>> v{{"nope", {1}}};
    CHECK(iotest::message_of<Error>([&] { assign_from_values(p, v); }) ==
          "cifarnet: assign_from_values: no parameter named 'nope'");
  }
}

namespace {
/// Stands in for an optimizer: two slots and a scalar, exposed through visit_state like optim/state.hpp.
struct FakeOptimizer {
  using Scalar = float;
  std::vector<float> m = {1, 2, 3, 4}, v = {5, 6};
  float power = 0.9f;
  template <class F>
  void visit_state(F&& f) {
    f("conv1/weights/Adam", m.data(), {2, 2});
    f("conv1/biases/Adam_1", v.data(), {2});
    f("beta1_power", &power, {});
  }
};
}  // namespace

TEST_CASE("optimizer state round-trips through a checkpoint by TF slot name", "[io][checkpoint]") {
  iotest::TempDir dir;
  FakeOptimizer a;
  StateDict d;
  add_state(d, a);
  CHECK(d.at("conv1/weights/Adam").shape == std::vector<std::size_t>{2, 2});
  CHECK(d.at("beta1_power").shape.empty());
  write_safetensors(dir / "o.safetensors", d);
  const auto r = read_safetensors(dir / "o.safetensors");
  FakeOptimizer b;
  b.m.assign(4, 0.0f);
  b.v.assign(2, 0.0f);
  b.power = 0;
  load_state(b, r);
  CHECK(b.m == a.m);
  CHECK(b.v == a.v);
  CHECK(b.power == a.power);

  SECTION("a missing slot changes nothing") {
    StateDict partial = r;
    partial.erase("beta1_power");
    FakeOptimizer c;
    c.m.assign(4, 0.0f);
    CHECK(iotest::message_of<DataError>([&] { load_state(c, partial); }) ==
          "cifarnet: '" + dir / "o.safetensors" + "' has no state tensor 'beta1_power' []");
    CHECK(c.m == std::vector<float>(4, 0.0f));
  }
  SECTION("a misshapen slot names both shapes") {
    StateDict bad = r;
    bad.set<float>("conv1/biases/Adam_1", {3}, {1, 2, 3});
    FakeOptimizer c;
    CHECK(iotest::message_of<ShapeError>([&] { load_state(c, bad); }) ==
          "cifarnet: state 'conv1/biases/Adam_1' has shape [2] but tensor 'conv1/biases/Adam_1' in '" +
              dir / "o.safetensors" + "' has shape [3]");
  }
  SECTION("a prefix") {
    StateDict p;
    add_state(p, a, "opt/");
    CHECK(p.contains("opt/beta1_power"));
    FakeOptimizer c;
    c.power = 0;
    load_state(c, p, "opt/");
    CHECK(c.power == 0.9f);
  }
}

// ------------------------------------------------- crash consistency (issue 9)

TEST_CASE(
    "bit flips and truncations anywhere in a checkpoint are DataErrors naming the file, and resume falls "
    "back",
    "[io][checkpoint][errors][crc]") {
  iotest::TempDir dir;
  CheckpointManager m(dir.path());
  m.save(1, training_dict(1));
  m.save(2, training_dict(2));
  const std::string newest = dir / "model.ckpt-2.safetensors";
  const auto good = iotest::read_bytes(newest);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | good[std::size_t(i)];
  const std::string text(good.begin(), good.end());
  auto in_header = [&](const std::string& what, std::size_t skip = 0) {
    const auto pos = text.find(what);
    REQUIRE(pos != std::string::npos);
    REQUIRE(pos + skip < 8 + n);
    return pos + skip;
  };
  const std::size_t data = 8 + n, size = good.size();

  struct Damage {
    std::string what;
    std::vector<std::uint8_t> bytes;
  };
  std::vector<Damage> cases;
  auto flip = [&](const std::string& what, std::size_t at, int bit) {
    auto b = good;
    b[at] ^= std::uint8_t(1u << bit);
    cases.push_back({what + " (bit " + std::to_string(bit) + " of byte " + std::to_string(at) + ")", b});
  };
  auto cut = [&](const std::string& what, std::size_t len) {
    cases.push_back({what + " (truncated to " + std::to_string(len) + " bytes)",
                     std::vector<std::uint8_t>(good.begin(), good.begin() + std::ptrdiff_t(len))});
  };
  flip("header length, low byte", 0, 0);
  flip("header length, high byte", 7, 6);
  flip("the metadata key", in_header("__metadata__", 3), 1);
  flip("a checksum value", in_header("cifarnet.crc32c/conv1/weights\":\"", 33), 0);
  flip("the header checksum value", in_header("cifarnet.crc32c:header\":\"", 31), 2);
  flip("the RNG state", in_header("rng/data\":\"", 12), 0);
  flip("the pipeline position", in_header("offset 2"), 3);
  flip("a tensor name", in_header("\"conv1/weights\":{", 3), 5);
  flip("a dtype", in_header("\"F32\"", 2), 1);
  flip("a shape", in_header("\"shape\":[3,3,2,4]", 11), 0);
  flip("data offsets", in_header("\"data_offsets\":[", 17), 0);
  flip("the header padding or closing brace", data - 1, 5);
  flip("the first data byte", data, 0);
  flip("a data byte in the middle", data + (size - data) / 2, 7);
  flip("the last data byte", size - 1, 3);
  cut("empty", 0);
  cut("inside the length", 5);
  cut("just the length", 8);
  cut("inside the header", 8 + n / 2);
  cut("the header without data", data);
  cut("inside the data", data + (size - data) / 3);
  cut("all but the last byte", size - 1);
  {
    auto b = good;
    b.push_back(0);
    cases.push_back({"one byte appended", b});
  }

  for (const auto& c : cases) {
    INFO(c.what);
    iotest::write_bytes(newest, c.bytes);
    const auto msg = iotest::message_of<DataError>([&] { read_safetensors(newest); });
    CHECK_THAT(msg, Contains("cifarnet: file '" + newest + "' at byte offset "));
    const auto r = CheckpointManager(dir.path()).restore_latest();
    REQUIRE(r);
    CHECK(r->checkpoint.step == 1);
    CHECK(global_step(r->dict) == 1);
    REQUIRE(r->warnings.size() == 1);
    CHECK(r->warnings[0] == "skipping checkpoint '" + newest + "' (step 2): " + msg);
    REQUIRE(r->corrupt.size() == 1);
    CHECK(r->corrupt[0].path == newest);
  }
  CHECK(cases.size() == 23);
  // restore_latest only reads: the damaged file is still there
  CHECK(iotest::list_dir(dir.path()) ==
        std::vector<std::string>{"checkpoint", "model.ckpt-1.safetensors", "model.ckpt-2.safetensors"});
}

TEST_CASE(
    "set_aside keeps a corrupt checkpoint as <file>.corrupt, out of the index, never overwritten or rotated",
    "[io][checkpoint][errors]") {
  iotest::TempDir dir;
  CheckpointManager m(dir.path(), 2);
  m.save(1, small_dict(1));
  m.save(2, small_dict(2));
  const std::string newest = dir / "model.ckpt-2.safetensors";
  auto bad = iotest::read_bytes(newest);
  bad[bad.size() - 1] ^= 1;
  iotest::write_bytes(newest, bad);

  auto r = m.restore_latest();
  REQUIRE(r);
  REQUIRE(r->corrupt.size() == 1);
  CHECK(m.set_aside(r->corrupt[0]) == newest + ".corrupt");
  CHECK(m.checkpoints().size() == 1);
  CHECK(m.latest() == dir / "model.ckpt-1.safetensors");
  CHECK(index_text(dir.path()) ==
        "model_checkpoint_path: \"model.ckpt-1.safetensors\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-1.safetensors\"\n");
  // a new manager sees only step 1, without warnings
  CHECK(CheckpointManager(dir.path()).checkpoints().size() == 1);
  CHECK(CheckpointManager(dir.path()).warnings().empty());

  // saving step 2 again and rotating past it leaves the .corrupt file alone
  for (int s = 2; s <= 5; ++s) m.save(s, small_dict(s));
  CHECK(iotest::list_dir(dir.path()) ==
        std::vector<std::string>{"checkpoint", "model.ckpt-2.safetensors.corrupt", "model.ckpt-4.safetensors",
                                 "model.ckpt-5.safetensors"});
  CHECK(iotest::read_bytes(newest + ".corrupt") == bad);

  // a second corrupt file of the same name goes to .corrupt-2; the last one empties the index
  iotest::write_bytes(dir / "model.ckpt-5.safetensors", {1, 2, 3});
  iotest::write_bytes(dir / "model.ckpt-4.safetensors", {});
  CHECK_THROWS_AS(m.restore_latest(), DataError);
  CHECK(m.set_aside({5, dir / "model.ckpt-5.safetensors"}) == dir / "model.ckpt-5.safetensors.corrupt");
  m.save(2, small_dict(2));
  iotest::write_bytes(newest, {9});
  CHECK(m.set_aside({2, newest}) == newest + ".corrupt-2");
  CHECK(m.set_aside({4, dir / "model.ckpt-4.safetensors"}) == dir / "model.ckpt-4.safetensors.corrupt");
  CHECK(m.checkpoints().empty());
  CHECK_FALSE(std::filesystem::exists(dir / "checkpoint"));
  CHECK_FALSE(CheckpointManager(dir.path()).latest());
  CHECK_THAT(iotest::message_of<IoError>([&] {
               m.set_aside({7, dir / "model.ckpt-7.safetensors"});
             }),
             Contains("cannot set the corrupt checkpoint '" + dir / "model.ckpt-7.safetensors" +
                      "' aside as '" + dir / "model.ckpt-7.safetensors.corrupt': No such file or directory"));
}

TEST_CASE("opening a directory removes the temporary files of saves whose process was killed, and only those",
          "[io][checkpoint][atomic]") {
  iotest::TempDir dir;
  {
    CheckpointManager m(dir.path());
    m.save(3, small_dict(3));
  }
  const std::string dead = std::to_string(dead_pid());
  const std::string self = std::to_string(::getpid());
  const std::vector<std::string> stale = {".model.ckpt-4.safetensors.tmp-" + dead + "-0",
                                          ".checkpoint.tmp-" + dead + "-1"};
  const std::vector<std::string> kept = {
      ".model.ckpt-5.safetensors.tmp-1-0",             // pid 1 is alive
      ".model.ckpt-6.safetensors.tmp-" + self + "-7",  // this process
      ".other.safetensors.tmp-" + dead + "-0",         // not a checkpoint of this prefix
      ".model.ckpt-x.safetensors.tmp-" + dead + "-0",
      ".checkpoint.tmp-" + dead,                      // not <pid>-<n>
      "model.ckpt-8.safetensors.tmp-" + dead + "-0",  // no leading dot
  };
  for (const auto& f : stale) iotest::write_bytes(dir / f, {1, 2});
  for (const auto& f : kept) iotest::write_bytes(dir / f, {1, 2});

  CheckpointManager m(dir.path());
  std::vector<std::string> want;
  for (const auto& f : kept) want.push_back(f);
  want.push_back("checkpoint");
  want.push_back("model.ckpt-3.safetensors");
  std::sort(want.begin(), want.end());
  CHECK(iotest::list_dir(dir.path()) == want);
  REQUIRE(m.warnings().size() == 2);
  for (const auto& f : stale)
    CHECK_THAT(m.warnings()[0] + m.warnings()[1],
               Contains("removed '" + dir / f +
                        "', the temporary file of a save interrupted by the end of process " + dead));
  CHECK(m.latest() == dir / "model.ckpt-3.safetensors");
}

TEST_CASE("a save that fails is a CheckpointSaveError naming the file and the latest intact checkpoint",
          "[io][checkpoint][errors][atomic]") {
  iotest::TempDir dir;
  CheckpointOptions o;
  o.prefix = "a-rather-long-checkpoint-prefix-so-that-the-index-is-larger-than-the-checkpoint-file";
  {
    CheckpointManager m(dir.path(), o);
    m.save(1, StateDict());
  }
  const std::string first = dir / (o.prefix + "-1.safetensors");
  const auto before_ckpt = iotest::read_bytes(first);
  const auto before_index = iotest::read_bytes(dir / "checkpoint");
  REQUIRE(before_ckpt.size() < 150);
  REQUIRE(before_index.size() > 150);

  SECTION("the checkpoint file cannot be written") {
    const auto [code, msg] = with_file_size_limit(4096, [&] {
      CheckpointManager child(dir.path(), o);
      child.save(2, small_dict(2, 100000));
    });
    INFO(msg);
    CHECK(code == 0);
    const std::string target = dir / (o.prefix + "-2.safetensors");
    CHECK_THAT(msg, Contains("cifarnet: cannot write '" + target + "' (temporary file '"));
    CHECK_THAT(msg,
               Contains("): write failed after 4096 bytes: File too large; checkpoint step 2 was not saved, "
                        "the latest is still '" +
                        first + "' (step 1)"));
  }
  SECTION("the index cannot be written: the new checkpoint file is removed") {
    const auto [code, msg] = with_file_size_limit(150, [&] {
      CheckpointManager child(dir.path(), o);
      child.save(2, StateDict());
    });
    INFO(msg);
    CHECK(code == 0);
    CHECK_THAT(msg, Contains("cifarnet: cannot write '" + dir / "checkpoint" + "' (temporary file '" +
                             dir.path() + "/.checkpoint.tmp-"));
    CHECK_THAT(msg, Contains("File too large; checkpoint step 2 was not saved, the latest is still '" +
                             first + "' (step 1)"));
  }
  SECTION("in process: the error carries the step, the file and the previous checkpoint") {
    CheckpointManager m(dir.path(), o);
    const std::string target = dir / (o.prefix + "-2.safetensors");
    std::filesystem::create_directories(target + "/occupied");  // rename over a non-empty directory fails
    try {
      m.save(2, StateDict());
      FAIL("no error");
    } catch (const CheckpointSaveError& e) {
      CHECK(e.step() == 2);
      CHECK(e.path() == target);
      REQUIRE(e.previous());
      CHECK(e.previous()->step == 1);
      CHECK(e.previous()->path == first);
      CHECK_THAT(std::string(e.what()), Contains("cifarnet: cannot write '" + target + "': rename from '"));
    }
    CHECK(m.checkpoints().size() == 1);
    std::filesystem::remove_all(target);
  }
  CHECK(iotest::list_dir(dir.path()) == std::vector<std::string>{o.prefix + "-1.safetensors", "checkpoint"});
  CHECK(iotest::read_bytes(first) == before_ckpt);
  CHECK(iotest::read_bytes(dir / "checkpoint") == before_index);
  const auto r = CheckpointManager(dir.path(), o).restore_latest();
  REQUIRE(r);
  CHECK(r->checkpoint.step == 1);
  CHECK(r->warnings.empty());
}

TEST_CASE("WriteOptions::progress sees every piece of a checkpoint before it is renamed into place",
          "[io][checkpoint][atomic]") {
  iotest::TempDir dir;
  CheckpointOptions o;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> calls;
  const std::string target = dir / "model.ckpt-1.safetensors";
  o.write.progress = [&](std::uint64_t written, std::uint64_t size) {
    calls.emplace_back(written, size);
    CHECK_FALSE(std::filesystem::exists(target));
  };
  CheckpointManager m(dir.path(), o);
  const auto d = training_dict(1);
  m.save(1, d);
  const auto size = std::filesystem::file_size(target);
  REQUIRE(calls.size() == 1 + d.size());  // the header, then each tensor
  for (std::size_t i = 0; i < calls.size(); ++i) {
    CHECK(calls[i].second == size);
    if (i) CHECK(calls[i].first > calls[i - 1].first);
  }
  CHECK(calls.back().first == size);

  SECTION("an exception from it abandons the write") {
    o.write.progress = [](std::uint64_t, std::uint64_t) { throw IoError("stop here"); };
    CheckpointManager k(dir.path(), o);
    CHECK_THROWS_WITH(k.save(2, d), Contains("stop here"));
    CHECK(iotest::list_dir(dir.path()) == std::vector<std::string>{"checkpoint", "model.ckpt-1.safetensors"});
  }
}
