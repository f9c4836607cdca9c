// Runs a libFuzzer target over every file of the seed corpora named on the
// command line (folders or files), so that gcc builds and `bazel test` replay
// the corpus without libFuzzer. Exits nonzero if a file cannot be read.
#include <dirent.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool RunFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return false;
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(file)),
                             std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string path = argv[i];
    if (DIR* dir = opendir(path.c_str())) {
      while (dirent* entry = readdir(dir)) {
        if (entry->d_name[0] == '.') continue;
        if (!RunFile(path + "/" + entry->d_name)) return 1;
        ++runs;
      }
      closedir(dir);
    } else if (RunFile(path)) {
      ++runs;
    } else {
      std::fprintf(stderr, "cannot read %s\n", path.c_str());
      return 1;
    }
  }
  std::printf("ran %d corpus inputs\n", runs);
  return runs > 0 ? 0 : 1;
}
