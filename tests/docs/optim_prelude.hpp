// What docs/OPTIM.md's code fragments take as given: the headers, the
// namespaces and the names a program around them would define (a model, the
// number of steps, a batch source, a test set, loggers). The fragments are
// compiled against these declarations (tests/docs/CMakeLists.txt, snippets
// mode of extract_code.cmake); nothing here is run.
#pragma once

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/cifar10_cnn.hpp>
#include <cifarnet/optim/optim.hpp>
#include <cifarnet/train/trainer.hpp>

#include <cstdint>

using namespace cifarnet;
namespace opt = cifarnet::optim;

using DocsNet = Model<Sequential<Conv2d<3, 8, 3>, ReLU, GlobalAvgPool, Dense<8, 10>>, backend::OneDnn>;
extern DocsNet net;                      // the model being trained
extern Parameters<float>& params;        // its parameters
extern Device<backend::OneDnn>& device;  // its device
extern const std::int64_t steps_per_epoch, train_steps, total_steps;
extern std::int64_t step;            // the current step
const train::Batch& next_batch();    // the training batches
extern data::BatchStream& test_set;  // the evaluation batches
void log_step(std::int64_t step, double loss, double lr, double gradient_norm);
void log_precision(double precision);
void style_loss_backward(const float* image, float* image_gradient);
