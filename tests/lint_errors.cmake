# Library code throws only Tessera's error family (backend/Errors.h): fails listing every
# `throw std::...` under the library's directories.
#   cmake -DSOURCE_DIR=... -P lint_errors.cmake
set(found "")
foreach(dir backend cuda modules containers training data distributed models io)
  file(GLOB_RECURSE files ${SOURCE_DIR}/${dir}/*.h ${SOURCE_DIR}/${dir}/*.cpp ${SOURCE_DIR}/${dir}/*.cu)
  foreach(f ${files})
    file(STRINGS ${f} lines REGEX "throw std::")
    foreach(l ${lines})
      string(STRIP "${l}" l)
      list(APPEND found "${f}: ${l}")
    endforeach()
  endforeach()
endforeach()
if(found)
  list(JOIN found "\n  " text)
  message(FATAL_ERROR "library code throws a standard exception instead of a tessera::Error:\n  ${text}")
endif()
message(STATUS "library code throws only tessera::Error types")
