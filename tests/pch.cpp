// The translation unit that builds the test programs' precompiled header
// (CIFARNET_TEST_PCH, tests/CMakeLists.txt); it defines nothing.
