# Fails when docs/guide.md does not show docs/examples/first_network.cpp verbatim.
file(READ ${GUIDE} guide)
file(READ ${EXAMPLE} example)
string(FIND "${guide}" "```cpp\n${example}```\n<!-- end example -->" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "${GUIDE} does not show ${EXAMPLE} as it is; copy the file into the guide's example block")
endif()
