#pragma once
/// \file Everything Tessera offers, in one include: `#include <tessera/tessera.h>`.
///
/// The per-area headers below can be included on their own for faster builds; each
/// docs page names the header of what it describes.

// backend/: tensors, devices, errors, random numbers, the backend interface
#include "backend/Backend.h"
#include "backend/DType.h"
#include "backend/Errors.h"
#include "backend/Files.h"
#include "backend/Random.h"
#include "backend/Shape.h"
#include "backend/Tensor.h"

// modules/: every layer
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/BatchNormND.h"
#include "modules/Blueprint.h"
#include "modules/Cast.h"
#include "modules/Concat.h"
#include "modules/Conv.h"
#include "modules/ConvND.h"
#include "modules/Deconv.h"
#include "modules/DepthConcat.h"
#include "modules/Dropout.h"
#include "modules/Dropout2D.h"
#include "modules/Embedder.h"
#include "modules/Flatten.h"
#include "modules/Gelu.h"
#include "modules/Glue.h"
#include "modules/GroupLinear.h"
#include "modules/Identity.h"
#include "modules/Init.h"
#include "modules/InstanceNorm2D.h"
#include "modules/KMaxPool.h"
#include "modules/LCN.h"
#include "modules/LRN.h"
#include "modules/Linear.h"
#include "modules/MaxUnpool2D.h"
#include "modules/Module.h"
#include "modules/MulAddConst.h"
#include "modules/NoiseInjector.h"
#include "modules/PRelu.h"
#include "modules/Pad.h"
#include "modules/Penalty.h"
#include "modules/Pool.h"
#include "modules/PoolND.h"
#include "modules/RNN.h"
#include "modules/Reduce.h"
#include "modules/Replicate.h"
#include "modules/Reshape.h"
#include "modules/Slice.h"
#include "modules/SoftMax.h"
#include "modules/SpatialTf.h"
#include "modules/Split.h"
#include "modules/SubtractMean.h"
#include "modules/Tile.h"
#include "modules/ToList.h"
#include "modules/Transpose.h"
#include "modules/Upsample.h"

// containers/: Sequential, Parallel, Node, Graph, the memory plan, fusion
#include "containers/Container.h"
#include "containers/Fusion.h"
#include "containers/Graph.h"
#include "containers/MemoryPlan.h"
#include "containers/Node.h"
#include "containers/Parallel.h"
#include "containers/Sequential.h"

// training/: costs, optimizers, schedules, Trainer/Validator/Calculator, checkpoints, profiles, IDX data
#include "training/Average.h"
#include "training/CTC.h"
#include "training/Checkpoint.h"
#include "training/Cost.h"
#include "training/CrossEntropy.h"
#include "training/Handlers.h"
#include "training/Idx.h"
#include "training/L1Hinge.h"
#include "training/Multi.h"
#include "training/Optimizer.h"
#include "training/PointwiseCosts.h"
#include "training/Profile.h"
#include "training/SVM.h"
#include "training/Schedule.h"

// data/: data sets (CIFAR, image folders, IDX, .npy), image files, transforms, the loader
#include "data/Dataset.h"
#include "data/Image.h"
#include "data/Loader.h"
#include "data/Transform.h"

// distributed/: communicators and data-parallel training
#include "distributed/Communicator.h"
#include "distributed/DataParallel.h"

// models/: the zoo
#include "models/LeNet.h"
#include "models/ResNet.h"
#include "models/Zoo.h"

// io/: blueprints and HDF5 model files
#include "io/Factory.h"
#include "io/Hdf5.h"
#include "io/Npy.h"
#include "io/Onnx.h"
#include "io/Summary.h"
