// What docs/API.md's code fragments take as given: the headers, the
// namespace and the names a program around them would define (a ResNet on
// oneDNN, its batch, a schedule, a pipeline...). The fragments are compiled
// against these declarations (snippets mode of extract_code.cmake), not run;
// its complete program ("```cpp program") is test_docs_api. Blocks for
// optional components ("```cpp cuda", "```cpp mpi") are compiled with their
// component (api_cuda_prelude.hpp, api_mpi_prelude.hpp).
#pragma once

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/core/filter_init.hpp>
#include <cifarnet/data/data.hpp>
#include <cifarnet/loss/label_smoothing.hpp>
#include <cifarnet/models/resnet.hpp>
#include <cifarnet/optim/optim.hpp>
#include <cifarnet/train/trainer.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "instances/resnet.hpp"  // the ResNet's members are compiled elsewhere

using namespace cifarnet;

using DocsResNet = Model<ResNetCifar<>, backend::OneDnn>;
extern DocsResNet net;  // the model (a ResNet-20 on oneDNN)
extern DocsResNet model;
extern Parameters<float> params;  // a model's parameters
extern std::size_t id;            // a parameter's id
extern Tensor<float> images;      // a batch
extern std::vector<std::int32_t> labels;
extern Tensor<float> logits;  // the model's output and its gradient
extern Tensor<float> dlogits;
extern Tensor<float> first_5000;     // 5,000 training images
extern optim::Schedule schedule;     // a learning-rate schedule
extern data::BatchStream& pipeline;  // the training batches
extern int rank;                     // the MPI rank
extern std::string job_dir;
std::int64_t ps_step();  // the parameter servers' global step
void warm_start(Parameters<float>& params);
