// Copyright horovod_cpp authors. The umbrella header: include this one.
#pragma once

#include "horovod_cpp/api.h"
#include "horovod_cpp/errors.h"
#include "horovod_cpp/handle.h"
#include "horovod_cpp/options.h"
#include "horovod_cpp/tensor.h"
#include "horovod_cpp/types.h"
