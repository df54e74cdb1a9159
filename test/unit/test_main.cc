// Copyright horovod_cpp authors. The Catch2 main of the unit tests.
#define CATCH_CONFIG_MAIN
// Catch's handler of fatal signals allocates memory; under ThreadSanitizer, whose reports end
// in abort(), that handler deadlocks inside the sanitizer's runtime and the test hangs until
// CTest's timeout instead of failing at once (seen in a CI run). Without it the report and
// the abort end the process.
#if defined(__SANITIZE_THREAD__)
#define CATCH_CONFIG_NO_POSIX_SIGNALS
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CATCH_CONFIG_NO_POSIX_SIGNALS
#endif
#endif
#include <catch2/catch.hpp>
