// LeakSanitizer's default suppressions for the worker binaries that speak
// TLS (linked in; read only when the binary runs under --config=asan).
//
// OpenSSL, under gRPC's TLS channels, keeps some allocations (per-thread
// error and DRBG state) that it frees only from its own exit handlers, which
// may run after LeakSanitizer's check; seen once in CI: 904 bytes from
// CRYPTO_zalloc in a TLS client at exit, with no frame of this project on
// the stack. Only allocations made inside libcrypto are suppressed: a leak
// in Reducer's code, or in gRPC's own, is still reported.
extern "C" __attribute__((used, visibility("default"))) const char*
__lsan_default_suppressions() {
  return "leak:libcrypto.so\n";
}
