# Writes OUT, a C++ file defining `extern const unsigned char NAME[]` (the bytes of IN, NUL-terminated)
# and `extern const size_t NAME_size`: a resource (the report page) built into the binary.
#   cmake -DIN=page.html -DOUT=page.cpp -DNAME=kPage -P embed_file.cmake
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" hex_length)
math(EXPR size "${hex_length} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
get_filename_component(in_name "${IN}" NAME)
file(WRITE "${OUT}" "// Written by tools/cmake/embed_file.cmake from ${in_name} at build time.\n#include <cstddef>\n\n"
     "extern const unsigned char ${NAME}[] = {\n${bytes}0x00};\nextern const std::size_t ${NAME}_size = ${size};\n")
