#include "core/device.h"

#include <sstream>

#include "gtest/gtest.h"

namespace reducer {
namespace {

TEST(DeviceTest, DefaultIsTheCpu) {
  constexpr Device d;
  EXPECT_TRUE(d.is_cpu());
  EXPECT_FALSE(d.is_cuda());
  EXPECT_EQ(d.type(), Device::Type::kCpu);
  EXPECT_EQ(d.index(), 0);
  EXPECT_EQ(d, Device::Cpu());
}

TEST(DeviceTest, CudaCarriesItsIndex) {
  constexpr Device d = Device::Cuda(3);
  EXPECT_TRUE(d.is_cuda());
  EXPECT_FALSE(d.is_cpu());
  EXPECT_EQ(d.type(), Device::Type::kCuda);
  EXPECT_EQ(d.index(), 3);
}

TEST(DeviceTest, EqualityComparesTypeAndIndex) {
  EXPECT_EQ(Device::Cuda(1), Device::Cuda(1));
  EXPECT_NE(Device::Cuda(0), Device::Cuda(1));
  // The CPU is index 0 too, yet not CUDA device 0.
  EXPECT_NE(Device::Cpu(), Device::Cuda(0));
  EXPECT_FALSE(Device::Cpu() != Device::Cpu());
}

TEST(DeviceTest, PrintsAsTypeAndIndex) {
  EXPECT_EQ(Device::Cpu().ToString(), "cpu");
  EXPECT_EQ(Device::Cuda(0).ToString(), "cuda:0");
  EXPECT_EQ(Device::Cuda(12).ToString(), "cuda:12");
  std::ostringstream out;
  out << Device::Cuda(2) << " " << Device::Cpu();
  EXPECT_EQ(out.str(), "cuda:2 cpu");
}

}  // namespace
}  // namespace reducer
