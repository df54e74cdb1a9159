// Copyright horovod_cpp authors. The Catch2 main of the unit tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
