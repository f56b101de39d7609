#include <catch2/catch.hpp>

#include <cifarnet/core/crc32c.hpp>

#include <string>

TEST_CASE("crc32c matches the Castagnoli check value and TensorFlow's masking", "[core][crc32c]") {
  const std::string s = "123456789";
  CHECK(cifarnet::crc32c(s.data(), s.size()) == 0xE3069283u);
  CHECK(cifarnet::crc32c("", 0) == 0u);
  // extending in two pieces equals one pass
  const auto a = cifarnet::crc32c_extend(cifarnet::crc32c(s.data(), 4), s.data() + 4, s.size() - 4);
  CHECK(a == 0xE3069283u);
  const std::uint32_t crc = 0xE3069283u;
  CHECK(cifarnet::crc32c_unmask(cifarnet::crc32c_mask(crc)) == crc);
  CHECK(cifarnet::crc32c_mask(crc) != crc);
}
