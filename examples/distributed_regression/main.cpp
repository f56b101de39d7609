// distributed_regression — the seed's distributed toy: a parameter server
// and three workers fit y = x² + noise, asynchronously, then the chief
// evaluates the fitted curve and plots it (docs/DISTRIBUTED_REGRESSION.md).
//
//   mpirun -np 4 distributed_regression                 # the seed's run: 100000 steps
//   mpirun -np 4 distributed_regression --train-steps 5000 --learning-rate 0.05 --job-dir /tmp/reg
//
// The seed, in C++:
//   data     x = linspace(-1, 1, 100) (a column), y = x² + normal(0, 0.1)
//            noise, the same on every process (--seed fixes the noise);
//   network  dense(1 → 10) + ReLU, dense(10 → 1) (tf.layers.dense: Glorot
//            uniform weights, zero biases); loss tf.losses.mean_squared_error;
//            plain gradient descent, learning rate 0.001;
//   cluster  rank 0 is the parameter server (--num-ps of them: ranks
//            [0, num_ps)), the others are workers; worker 0 (rank num_ps)
//            is the chief (distributed/parameter_server.hpp, the project's
//            replica_device_setter and tf.train.Server);
//   training asynchronous (between-graph replication): each worker pulls the
//            variables, computes the gradient of the loss on the whole data
//            set (the seed feeds every worker all 100 points) and pushes it;
//            the server applies it at once. Every worker stops when the
//            global step reaches --train-steps (StopAtStepHook(last_step)).
//            The global step counts every worker's updates; each worker
//            prints "Task: k | Step: s | Loss: l" when an update of its
//            makes the global step a multiple of --log-every (500, as the
//            seed's shared counter);
//   eval     once every worker has stopped, the chief pulls the final
//            variables, saves them (<job-dir>/model.safetensors, the seed's
//            checkpoint_dir), predicts y on the 100 x of the data set (the
//            seed's eval()), prints the mean squared error and that of
//            predicting the mean of y, and writes the seed's plot as a PNG
//            (--plot, default <job-dir>/regression.png): the data as blue
//            points, the network's curve in red, on axes with ticks every 0.5.
//
// The seed's workers print from a multiprocessing counter they share; here
// the servers' global step is that counter. A process that fails (a bad flag value excepted,
// which every rank sees and refuses alike with exit status 2) ends the whole
// job, so no rank waits for it (--collective-timeout bounds every wait).
#include <CLI/CLI.hpp>

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <cifarnet/cifarnet.hpp>
#include <cifarnet/distributed/data_parallel.hpp>
#include <cifarnet/distributed/mpi.hpp>
#include <cifarnet/distributed/parameter_server.hpp>
#include <cifarnet/io/image.hpp>
#include <cifarnet/io/parameter_state.hpp>
#include <cifarnet/io/save_load.hpp>
#include <cifarnet/optim/sgd.hpp>

using namespace cifarnet;
namespace dist = cifarnet::distributed;

namespace {

// tf.layers.dense(x, 10, tf.nn.relu); tf.layers.dense(l1, 1).
using Net = Sequential<Dense<1, 10>, ReLU, Dense<10, 1>>;
using RegressionModel = Model<Net, backend::Reference>;

struct Flags {
  std::string job_dir = "./tmp", plot;
  int num_ps = 1;
  std::int64_t train_steps = 100000, log_every = 500;
  double learning_rate = 0.001, noise_stddev = 0.1, collective_timeout = 120;
  int num_examples = 100;
  std::uint64_t seed = 0, init_seed = 1;
};

void validate(const Flags& f) {
  if (f.train_steps < 0)
    throw ConfigError("--train-steps must be >= 0, got " + std::to_string(f.train_steps));
  if (f.log_every <= 0) throw ConfigError("--log-every must be positive, got " + std::to_string(f.log_every));
  if (!(f.learning_rate > 0) || !std::isfinite(f.learning_rate))
    throw ConfigError("--learning-rate must be a positive number");
  if (!(f.noise_stddev >= 0) || !std::isfinite(f.noise_stddev))
    throw ConfigError("--noise-stddev must be a number >= 0");
  if (f.num_examples < 2)
    throw ConfigError("--num-examples must be at least 2 (linspace(-1, 1, n) needs two ends), got " +
                      std::to_string(f.num_examples));
  if (!(f.collective_timeout > 0)) throw ConfigError("--collective-timeout must be positive");
  if (f.job_dir.empty()) throw ConfigError("--job-dir must not be empty");
}

/// The seed's data set: x = linspace(-1, 1, n)[:, newaxis], y = x² + noise.
struct Data {
  Tensor<float> x, y;
};
Data make_data(int n, double stddev, std::uint64_t seed) {
  Data d;
  const std::size_t m = std::size_t(n);
  d.x = Tensor<float>(Tensor<float>::shape_type{m, 1, 1, 1});
  d.y = Tensor<float>(Tensor<float>::shape_type{m, 1, 1, 1});
  Rng rng(seed);
  for (std::size_t i = 0; i < m; ++i) {
    const double x = -1.0 + 2.0 * double(i) / double(m - 1);
    d.x.data()[i] = float(x);
    d.y.data()[i] = float(x * x + rng.normal(0.0, stddev));
  }
  return d;
}

// ------------------------------------------------------------------ the plot
// plt.scatter(x, y, c='b'); plt.plot(x, result, c='r'), drawn into an RGB
// image: a white canvas, a black frame with ticks every 0.5 on both axes.
struct Rgb {
  std::uint8_t r, g, b;
};
class Canvas {
 public:
  Canvas(int width, int height, double x0, double x1, double y0, double y1)
      : img_(std::size_t(height), std::size_t(width), 3, 255), x0_(x0), x1_(x1), y0_(y0), y1_(y1) {}
  // Data coordinates → pixel coordinates inside the frame.
  double px(double x) const { return kMargin + (x - x0_) / (x1_ - x0_) * double(width() - 2 * kMargin); }
  double py(double y) const {
    return double(height() - kMargin) - (y - y0_) / (y1_ - y0_) * double(height() - 2 * kMargin);
  }
  void dot(double x, double y, double radius, Rgb c) {
    const double cx = px(x), cy = py(y);
    for (int j = int(std::floor(cy - radius)); j <= int(std::ceil(cy + radius)); ++j)
      for (int i = int(std::floor(cx - radius)); i <= int(std::ceil(cx + radius)); ++i)
        if ((i - cx) * (i - cx) + (j - cy) * (j - cy) <= radius * radius) set(i, j, c);
  }
  /// A segment between two data points, `thick` pixels wide.
  void line(double xa, double ya, double xb, double yb, int thick, Rgb c) {
    segment(px(xa), py(ya), px(xb), py(yb), thick, c);
  }
  void frame_and_ticks() {
    const Rgb black{0, 0, 0};
    const double l = kMargin, r = width() - kMargin, t = kMargin, b = height() - kMargin;
    segment(l, t, r, t, 1, black);
    segment(l, b, r, b, 1, black);
    segment(l, t, l, b, 1, black);
    segment(r, t, r, b, 1, black);
    for (double v = std::ceil(x0_ * 2) / 2; v <= x1_ + 1e-9; v += 0.5)
      segment(px(v), b, px(v), b + kTick, 1, black);
    for (double v = std::ceil(y0_ * 2) / 2; v <= y1_ + 1e-9; v += 0.5)
      segment(l - kTick, py(v), l, py(v), 1, black);
  }
  const io::Image8& image() const { return img_; }

 private:
  static constexpr int kMargin = 40, kTick = 6;
  int width() const { return int(img_.width); }
  int height() const { return int(img_.height); }
  void set(int i, int j, Rgb c) {
    if (i < 0 || j < 0 || i >= width() || j >= height()) return;
    img_.at(std::size_t(j), std::size_t(i), 0) = c.r;
    img_.at(std::size_t(j), std::size_t(i), 1) = c.g;
    img_.at(std::size_t(j), std::size_t(i), 2) = c.b;
  }
  // Steps along the longer axis one pixel at a time, stamping a square.
  void segment(double xa, double ya, double xb, double yb, int thick, Rgb c) {
    const int steps = std::max(1, int(std::ceil(std::max(std::abs(xb - xa), std::abs(yb - ya)))));
    for (int s = 0; s <= steps; ++s) {
      const double t = double(s) / double(steps);
      const int x = int(std::lround(xa + t * (xb - xa))), y = int(std::lround(ya + t * (yb - ya)));
      for (int dy = -(thick - 1) / 2; dy <= thick / 2; ++dy)
        for (int dx = -(thick - 1) / 2; dx <= thick / 2; ++dx) set(x + dx, y + dy, c);
    }
  }
  io::Image8 img_;
  double x0_, x1_, y0_, y1_;
};

void write_plot(const std::string& path, const Data& d, const Tensor<float>& pred) {
  const std::size_t n = d.x.size();
  double lo = 0, hi = 1;
  for (std::size_t i = 0; i < n; ++i)
    lo = std::min({lo, double(d.y.data()[i]), double(pred.data()[i])}),
    hi = std::max({hi, double(d.y.data()[i]), double(pred.data()[i])});
  // Finite by construction (the training loop refused a non-finite loss).
  const double pad = 0.05 * (hi - lo);
  Canvas c(640, 480, -1.05, 1.05, lo - pad, hi + pad);
  c.frame_and_ticks();
  for (std::size_t i = 0; i < n; ++i) c.dot(d.x.data()[i], d.y.data()[i], 3.0, {0, 0, 255});
  for (std::size_t i = 0; i + 1 < n; ++i)
    c.line(d.x.data()[i], pred.data()[i], d.x.data()[i + 1], pred.data()[i + 1], 3, {255, 0, 0});
  io::save_png(path, c.image());
}

// -------------------------------------------------------------- the training
/// A worker's loop: pull, the gradient of the MSE on the whole data set, push.
void train_worker(const Flags& f, const dist::PsRoles& roles, dist::ParameterServerClient<float>& client,
                  RegressionModel& net, const Data& d) {
  Tensor<float> dpred;
  while (true) {
    const std::int64_t step = client.pull();
    if (step >= f.train_steps) break;
    const Tensor<float>& pred = net.forward(d.x, Mode::Train);
    const float loss = mean_squared_error(pred, d.y, &dpred);
    if (!std::isfinite(loss))
      throw NumericsError("Model diverged with loss = NaN (worker " + std::to_string(roles.worker_index()) +
                          ", global step " + std::to_string(step) + "); try a smaller --learning-rate");
    net.backward(dpred);
    const std::int64_t after = client.push(f.learning_rate);
    if (after % f.log_every == 0)
      std::cout << "Task: " << roles.worker_index() << " | Step: " << after << " | Loss: " << loss << "\n"
                << std::flush;
  }
}

int run(const Flags& f, dist::Communicator& world, const dist::PsRoles& roles) {
  const Data d = make_data(f.num_examples, f.noise_stddev, f.seed);
  RegressionModel net({1, 1, 1}, DataFormat::NCHW, {}, f.init_seed);
  Parameters<float>& params = net.parameters();
  // The workers among themselves: they agree that every update is in.
  MPI_Comm workers_comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, roles.is_worker() ? 1 : 0, roles.rank(), &workers_comm);
  dist::Communicator workers(workers_comm, f.collective_timeout);
  MPI_Comm_free(&workers_comm);  // `workers` holds its own duplicate

  if (roles.is_ps()) {
    std::cout << "Start Parameter Server: " << roles.rank() << "\n" << std::flush;
    dist::ParameterServer<float> ps(world, params, roles);
    std::optional<optim::GradientDescent<float>> opt;
    if (auto sel = ps.selection()) opt.emplace(params, optim::GradientDescentOptions(), *sel);
    StateDict initial;
    dist::broadcast_state_dict(world, initial, roles.chief_rank());
    const dist::ServeStats st = ps.serve(opt ? &*opt : nullptr, initial);
    std::cout << "parameter server (rank " << roles.rank() << "): " << st.updates << " updates (";
    for (std::size_t w = 0; w < st.updates_per_worker.size(); ++w)
      std::cout << (w ? ", " : "") << "worker " << w << ": " << st.updates_per_worker[w];
    std::cout << "), mean staleness " << st.mean_staleness() << "\n" << std::flush;
    return 0;
  }

  std::cout << "Start Worker: " << roles.worker_index() << " (rank " << roles.rank() << ")\n" << std::flush;
  dist::ParameterServerClient<float> client(world, params, roles);
  StateDict initial;
  if (roles.is_chief()) {  // the chief's initial values become every server's
    io::add_parameters(initial, params);
    io::set_global_step(initial, 0);
  }
  dist::broadcast_state_dict(world, initial, roles.chief_rank());
  train_worker(f, roles, client, net, d);
  workers.barrier("the workers' end");  // every update is in
  if (roles.is_chief()) {
    const std::int64_t step = client.pull();  // the final variables
    std::filesystem::create_directories(f.job_dir);
    const std::string model = (std::filesystem::path(f.job_dir) / "model.safetensors").string();
    io::save(net, model);
    const Tensor<float>& pred = net.forward(d.x, Mode::Infer);
    const double mse = mean_squared_error(pred, d.y);
    double mean = 0;
    for (std::size_t i = 0; i < d.y.size(); ++i) mean += d.y.data()[i];
    mean /= double(d.y.size());
    double base = 0;
    for (std::size_t i = 0; i < d.y.size(); ++i) base += (d.y.data()[i] - mean) * (d.y.data()[i] - mean);
    base /= double(d.y.size());
    const std::string plot =
        f.plot.empty() ? (std::filesystem::path(f.job_dir) / "regression.png").string() : f.plot;
    write_plot(plot, d, pred);
    std::cout << "Evaluation at global step " << step << ": mse = " << mse
              << " (predicting the mean: " << base << ")\nSaved " << model << "\nPlot: " << plot << "\n"
              << std::flush;
  }
  workers.barrier("the chief's evaluation");
  const dist::WorkerStats& s = client.stats();
  std::cout << "Worker Done: " << roles.worker_index() << " (rank " << roles.rank() << "): " << s.updates
            << " updates, " << s.stale_updates << " on stale values\n"
            << std::flush;
  client.finish();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "The seed's distributed toy: 1 parameter server + 3 workers fit y = x^2 + noise (mpirun -np 4)"};
  Flags f;
  app.add_option("--job-dir", f.job_dir,
                 "Where the chief saves model.safetensors and the plot (the seed's ./tmp).")
      ->capture_default_str();
  app.add_option("--num-ps", f.num_ps, "Parameter servers: the first --num-ps ranks; the others are workers.")
      ->capture_default_str();
  app.add_option("--train-steps", f.train_steps,
                 "Stop when the global step (every worker's updates) reaches this.")
      ->capture_default_str();
  app.add_option("--learning-rate", f.learning_rate, "Gradient descent's learning rate.")
      ->capture_default_str();
  app.add_option("--log-every", f.log_every,
                 "A worker prints its loss when its update makes the global step a "
                 "multiple of this.")
      ->capture_default_str();
  app.add_option("--num-examples", f.num_examples, "Points of linspace(-1, 1, n).")->capture_default_str();
  app.add_option("--noise-stddev", f.noise_stddev, "Standard deviation of the Gaussian noise added to x^2.")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "Seed of the noise (the same data on every process).")
      ->capture_default_str();
  app.add_option("--init-seed", f.init_seed, "Seed of the network's initial values (the chief's are used).")
      ->capture_default_str();
  app.add_option("--plot", f.plot, "The PNG the chief writes (default <job-dir>/regression.png).");
  app.add_option(
         "--collective-timeout", f.collective_timeout,
         "Seconds a process waits for a message or a collective before it ends the job with an error.")
      ->capture_default_str();
  // MPI starts first (mpirun may pass arguments of its own).
  dist::Environment env(&argc, &argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  int size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::optional<dist::PsRoles> roles;
  try {  // the same on every rank: rank 0 says why, each exits with 2
    validate(f);
    roles.emplace(size, rank, f.num_ps);
  } catch (const ConfigError& e) {
    if (rank == 0) std::cerr << "distributed_regression: " << e.what() << "\n";
    return 2;
  }
  try {
    dist::Communicator world(MPI_COMM_WORLD, f.collective_timeout);
    return run(f, world, *roles);
  } catch (const std::exception& e) {  // this rank's failure ends the job
    std::cerr << "distributed_regression: rank " << rank << ": " << e.what() << "\n" << std::flush;
    dist::Environment::abort_all(1);
  }
}
