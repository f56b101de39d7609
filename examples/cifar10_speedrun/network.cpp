// The airbench94 network on oneDNN, compiled once (speedrun.hpp).
#include "speedrun.hpp"

template class cifarnet::Model<cifarnet::Airbench94, cifarnet::backend::OneDnn>;
