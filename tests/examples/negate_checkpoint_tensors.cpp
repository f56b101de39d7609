// tests/examples/negate_checkpoint_tensors.cpp — rewrites a safetensors
// checkpoint with some float32 tensors negated, for the test that shows
// cifar10_eval evaluates the moving averages and not the raw weights:
//
//   negate_checkpoint_tensors <in.safetensors> <out.safetensors> <name>...
//
// Negating softmax_linear's weights and biases turns the logits around, so
// the network predicts its least likely class instead of its most likely
// one: negating the raw tensors must leave cifar10_eval's precision as it
// was, negating their "/ExponentialMovingAverage" shadows must change it.
// Every other tensor and the metadata are copied; the checksums are written
// anew. A name the checkpoint lacks, or a tensor that is not float32, is an
// error naming it.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <cifarnet/io/safetensors.hpp>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: negate_checkpoint_tensors <in.safetensors> <out.safetensors> <name>...\n");
    return 2;
  }
  try {
    cifarnet::StateDict dict = cifarnet::io::read_safetensors(argv[1]);
    for (int i = 3; i < argc; ++i) {
      cifarnet::TensorData* t = dict.find(argv[i]);
      if (!t) {
        std::fprintf(stderr, "negate_checkpoint_tensors: '%s' has no tensor '%s'\n", argv[1], argv[i]);
        return 1;
      }
      if (t->dtype != cifarnet::Dtype::F32) {
        std::fprintf(stderr, "negate_checkpoint_tensors: tensor '%s' of '%s' is not float32\n", argv[i],
                     argv[1]);
        return 1;
      }
      std::vector<float> v(t->bytes.size() / sizeof(float));
      std::memcpy(v.data(), t->bytes.data(), t->bytes.size());
      for (float& x : v) x = -x;
      std::memcpy(t->bytes.data(), v.data(), t->bytes.size());
    }
    cifarnet::io::write_safetensors(argv[2], dict);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "negate_checkpoint_tensors: %s\n", e.what());
    return 1;
  }
  std::printf("negated %d tensor(s) of %s into %s\n", argc - 3, argv[1], argv[2]);
  return 0;
}
