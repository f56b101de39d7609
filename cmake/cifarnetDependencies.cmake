# Finds everything cifarnet's INTERFACE target links to. Used both by the
# project's own CMakeLists.txt and by the installed package config, so a
# consumer's find_package(cifarnet) resolves the same dependencies.
include(CMakeFindDependencyMacro)
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_dependency(Threads)
find_dependency(xtensor)
find_dependency(xtensor-blas)
find_dependency(Eigen3 3.3 NO_MODULE)
find_dependency(dnnl CONFIG)
find_dependency(OpenMP COMPONENTS CXX)
find_dependency(nlohmann_json 3)
