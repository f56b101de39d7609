// What docs/FORMATS.md's code fragments take as given: a model, its
// optimizer and its trainer (snippets mode of extract_code.cmake; compiled,
// not run).
#pragma once

#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
#include <cifarnet/io/save_load.hpp>
#include <cifarnet/optim/momentum.hpp>
#include <cifarnet/train/trainer.hpp>

using namespace cifarnet;

using DocsNet = Model<Sequential<Conv2d<3, 8, 3>, ReLU, GlobalAvgPool, Dense<8, 10>>, backend::OneDnn>;
extern DocsNet net;
extern optim::Momentum<float>& optimizer;
extern train::Trainer<DocsNet>& trainer;
