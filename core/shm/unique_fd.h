// UniqueFd: sole owner of one file descriptor, closed when the owner is
// destroyed or reset. Move-only; -1 means "owns nothing". release() hands the
// descriptor to the caller, who then closes it.
#ifndef REDUCER_CORE_SHM_UNIQUE_FD_H_
#define REDUCER_CORE_SHM_UNIQUE_FD_H_

namespace reducer {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // The descriptor, no longer owned (-1 if none was).
  int release();
  // Closes the owned descriptor (if any) and owns `fd` instead.
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

}  // namespace reducer

#endif  // REDUCER_CORE_SHM_UNIQUE_FD_H_
