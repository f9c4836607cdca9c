#include "server/jobs/tenants.h"

#include <algorithm>
#include <utility>

namespace reducer {
namespace {

// Entries below this many are never swept (sweeping costs more than they do).
constexpr size_t kUnsweptEntries = 64;

}  // namespace

Tenant::Tenant(std::string name, std::optional<size_t> memory_limit,
               size_t max_pending)
    : name_(std::move(name)), max_pending_(max_pending) {
  if (memory_limit.has_value()) memory_.emplace(*memory_limit);
}

std::shared_ptr<MemoryBudget> Tenant::memory() {
  if (!memory_.has_value()) return nullptr;
  return std::shared_ptr<MemoryBudget>(shared_from_this(), &*memory_);
}

bool Tenant::TryAddPending(size_t n) {
  size_t pending = pending_.load(std::memory_order_relaxed);
  do {
    if (n > max_pending_ || pending > max_pending_ - n) return false;
  } while (!pending_.compare_exchange_weak(pending, pending + n,
                                           std::memory_order_relaxed));
  return true;
}

Tenants::Tenants(const EngineOptions* options, const MemoryBudget* memory,
                 JobTokens* tokens)
    : options_(options), memory_(memory), tokens_(tokens) {}

std::string Tenants::NameOf(absl::string_view job) const {
  return TenantOf(tokens_, job);
}

std::shared_ptr<Tenant> Tenants::Get(const std::string& name) {
  absl::MutexLock lock(&mu_);
  std::weak_ptr<Tenant>& entry = tenants_[name];
  if (std::shared_ptr<Tenant> live = entry.lock()) return live;
  std::optional<size_t> share;
  if (options_->max_tenant_memory_fraction < 1) {
    share = static_cast<size_t>(static_cast<double>(memory_->limit()) *
                                options_->max_tenant_memory_fraction);
  }
  auto tenant = std::make_shared<Tenant>(
      name, share,
      static_cast<size_t>(
          std::max(0, options_->max_pending_collectives_per_tenant)));
  entry = tenant;
  if (tenants_.size() >= std::max(kUnsweptEntries, 2 * swept_size_)) {
    ForgetGoneLocked();
  }
  return tenant;
}

void Tenants::ForgetGoneLocked() {
  for (auto it = tenants_.begin(); it != tenants_.end();) {
    auto here = it++;
    if (here->second.expired()) tenants_.erase(here);
  }
  swept_size_ = tenants_.size();
}

size_t Tenants::live() {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [name, tenant] : tenants_) n += !tenant.expired();
  return n;
}

}  // namespace reducer
