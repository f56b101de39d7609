// examples/resnet_cifar10/run.cpp — the recipe of a run: the layout, the
// data, the schedule, the trainer's options, hooks, checkpoints, the
// distribution strategy, evaluation and the report, on the network the
// backend's translation unit makes (onednn.cpp, cuda.cpp). Typed on no
// backend: it compiles once for all of them.
#include "train.hpp"

namespace resnet_cifar10 {

int run(const Flags& f, recipes::Strategy& st, const train::GpuPlacement& gpus, NetworkBackend backend) {
  // The layout, decided by the chief and taken by every rank, on the first line.
  train::FormatChoice layout;
  if (st.chief()) layout = choose_layout(f, backend);
  st.broadcast_from_chief(layout.format, "data format broadcast");
  const DataFormat fmt = layout.format;
  std::cout << layout.describe() << "\n";
  if (!gpus.notice.empty()) std::cout << gpus.notice << "\n";
  st.set_intra_op_threads(f.num_intra_threads);
  if (st.parameter_server()) {  // asynchronous: the variables of the workers' model live here
    const auto server = backend.make(network_spec(f, fmt), train::TrainerOptions());
    return st.serve(server->trainer().parameters(), optim::MomentumOptions().momentum(f.momentum), std::cerr);
  }

  const DataSet data = load_data(f);
  const std::size_t n_train = data.train->size();
  // --epochs counts whole batches of the set (n_train // batch per epoch).
  if (f.epochs > 0)
    data::require_one_batch(
        n_train, std::size_t(f.train_batch_size),
        data.synthetic ? "the built-in synthetic training set" : data.train->description(),
        cifarnet::detail::concat("--epochs ", f.epochs,
                                 " counts whole batches of them: it would make no training step"));
  const double steps_per_epoch = double(n_train) / double(f.train_batch_size);
  const std::int64_t train_steps =
      f.epochs > 0 ? std::int64_t(f.epochs * double(n_train / std::size_t(f.train_batch_size)))
                   : f.train_steps;
  optim::NamedSchedule schedule = optim::make_schedule(
      f.schedule, {f.learning_rate, train_steps, schedule_steps_per_epoch(f, st, n_train), f.epochs > 0});
  if (f.schedule == "seed" && f.epochs <= 0)
    schedule.description += f.schedule_from_counted_examples
                                ? " (epochs of the " + std::to_string(n_train) + " examples read)"
                                : " (the seed's epochs of 45000 examples)";

  // The network and its trainer, from the backend's translation unit.
  const std::unique_ptr<recipes::Session> net =
      backend.make(network_spec(f, fmt), st.trainer_options(trainer_options(f, train_steps), f.max_seconds));
  // One process on a GPU: the arena stays there for the whole step (no-op on the CPU).
  if (st.size() == 1) net->set_device_resident(true);
  if (f.log_device_placement) std::cout << net->device() << "\n";
  data::recipes::ResNetTrainT<data::Cifar10Source> pipe(data.train, train_pipeline_options(f, fmt));
  std::cout << describe_run(f, st, *net, data, train_steps, steps_per_epoch, schedule.description, fmt)
            << "\n";

  // The seed's L2 term over every trainable parameter, then momentum.
  train::TrainerBase& trainer = net->trainer();
  st.set_momentum_optimizer(trainer, optim::WeightDecayOptions(f.weight_decay),
                            optim::MomentumOptions().momentum(f.momentum), schedule.schedule);
  if (CrossReplicaSum* s = st.sync_batch_norm()) net->set_cross_replica(s);
  trainer.add_state(train::stream_position_saveable(pipe));
  trainer.add_state(train::data_format_saveable(fmt));  // a resume takes the job's layout from here

  // Checkpoints and events: the chief's alone; the others get its state.
  std::optional<io::CheckpointManager> mgr;
  std::optional<io::EventWriter> events;
  bool restored = false;
  if (st.chief()) {
    fs::create_directories(f.job_dir);
    mgr.emplace(f.job_dir, std::size_t(f.keep_checkpoints));
    for (const auto& w : mgr->warnings()) std::cout << "WARNING: " << w << "\n";
    restored = trainer.restore_latest(*mgr, &std::cout);
  }
  st.share_state(trainer, pipe, f.seed);
  if (restored && trainer.global_step() >= train_steps)
    std::cout << "Already trained to step " << trainer.global_step() << " (--train-steps " << train_steps
              << "): evaluating only.\n";
  if (st.chief()) events.emplace(f.job_dir);
  auto eval = [&] { return evaluate(*net, f, data, fmt, *events, trainer.global_step()); };
  auto add_hook = st.hooks(trainer, f.max_seconds);  // distributed: on the chief only
  if (st.chief()) add_chief_hooks(add_hook, f, *mgr, *events, eval);

  const auto t0 = std::chrono::steady_clock::now();
  const std::int64_t start_step = trainer.global_step();
  trainer.run(st.feed(pipe));
  if (!trainer.last_trace_path().empty()) std::cout << "Last trace: " << trainer.last_trace_path() << "\n";
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  st.end_training(trainer, std::cerr);
  if (!st.chief()) return 0;  // the chief reports and evaluates
  const bool trained = trainer.global_step() > start_step;
  if (trained)
    std::printf("Trained steps %lld..%lld in %.1f s (%.1f examples/sec)\n",
                static_cast<long long>(start_step), static_cast<long long>(trainer.global_step()), secs,
                double(trainer.global_step() - start_step) * f.train_batch_size / secs);
  std::printf("%s", st.allreduce_report(trained).c_str());
  const auto r = eval();
  std::printf("%saccuracy = %.4f, loss = %.4f, global_step = %lld (%zu/%zu correct)\n",
              data.synthetic ? "[synthetic data] " : "", r.precision(), r.loss,
              static_cast<long long>(trainer.global_step()), r.correct, r.total);
  st.finish();
  return 0;
}

int explain(const Flags& f, recipes::Strategy& st, const train::GpuPlacement& gpus, NetworkBackend backend) {
  if (!st.chief()) return 0;  // the chief alone prints (the others' plans are the same)
  const train::FormatChoice layout = choose_layout(f, backend);
  std::cout << layout.describe() << "\n";
  if (!gpus.notice.empty()) std::cout << gpus.notice << "\n";
  // One model's batches: a tower's share of each batch, a synchronous
  // replica's slice of the global batch, an asynchronous worker's own batch;
  // the chief evaluates alone, on whole eval batches (towers: their share).
  std::size_t train_batch = std::size_t(f.train_batch_size), eval_batch = std::size_t(f.eval_batch_size);
  std::string one = "the model";
  if (f.num_gpus > 1) {
    train_batch /= std::size_t(f.num_gpus);
    eval_batch /= std::size_t(f.num_gpus);
    one = "one of the " + std::to_string(f.num_gpus) + " towers (each the same model, on its own GPU)";
  } else if (st.synchronous_replicas()) {
    train_batch /= std::size_t(st.size());
    one = "one of the " + std::to_string(st.size()) + " synchronous replicas (the chief evaluates alone)";
  } else if (st.async()) {
    one = "an asynchronous worker";
  }
  std::cout << "ResNet-" << f.num_layers << ", --precision " << f.precision << ": the step plans of " << one
            << ", training batch " << train_batch << ", evaluation batch " << eval_batch << "\n\n"
            << backend.explain(network_spec(f, layout.format), train_batch, eval_batch) << std::flush;
  return 0;
}

}  // namespace resnet_cifar10
