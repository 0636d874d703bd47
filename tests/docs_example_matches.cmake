# Fails when the page GUIDE does not show the file EXAMPLE verbatim in a ```cpp block
# followed by <!-- end example -->.
file(READ ${GUIDE} guide)
file(READ ${EXAMPLE} example)
string(FIND "${guide}" "```cpp\n${example}```\n<!-- end example -->" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "${GUIDE} does not show ${EXAMPLE} as it is; copy the file into the guide's example block")
endif()
