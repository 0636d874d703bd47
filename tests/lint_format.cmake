# The tree is formatted by its .clang-format: fails naming every C++ source file (library,
# tools, tests, examples, docs/examples) that `clang-format` would change, with the
# command that fixes them.
#   cmake -DSOURCE_DIR=... -DCLANG_FORMAT=... -P lint_format.cmake
set(files "")
foreach(dir backend cuda modules containers training data distributed models io tessera tools tests examples docs/examples python)
  file(GLOB_RECURSE found ${SOURCE_DIR}/${dir}/*.h ${SOURCE_DIR}/${dir}/*.cpp ${SOURCE_DIR}/${dir}/*.cu
       ${SOURCE_DIR}/${dir}/*.cuh)
  list(APPEND files ${found})
endforeach()
set(bad "")
foreach(f ${files})
  execute_process(COMMAND ${CLANG_FORMAT} --style=file --dry-run -Werror ${f}
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL 0)
    file(RELATIVE_PATH rel ${SOURCE_DIR} ${f})
    list(APPEND bad ${rel})
  endif()
endforeach()
list(LENGTH files count)
if(bad)
  list(JOIN bad " " text)
  message(FATAL_ERROR "not formatted by .clang-format: ${text}\n  fix with: clang-format -i ${text}")
endif()
message(STATUS "${count} files formatted by .clang-format")
