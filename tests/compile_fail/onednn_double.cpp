// Must NOT compile: the oneDNN backend is float only.
#include <cifarnet/backend/onednn.hpp>
#include <cifarnet/cifarnet.hpp>
using namespace cifarnet;
int main() {
  Model<Sequential<Conv2d<3, 4, 3>>, backend::OneDnn, double> m({3, 8, 8});
  return 0;
}
