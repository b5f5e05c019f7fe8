# deb_copyright.cmake — writes the .deb's copyright file (Debian's
# machine-readable format, DEP-5) from the licence texts themselves, so
# that it never parts from LICENSE or from the vendored uPlot's: psbench
# under BSD-3-Clause, and uPlot (web/vendor/uplot, compiled into
# psbench-master's dashboard) under MIT.
#
#   deb_copyright(OUT)  writes OUT at configure time

# A licence text as a DEP-5 field's continuation lines: each line indented
# one blank, an empty line written " .".
function(deb_copyright_body file var)
  # file(STRINGS) drops empty lines: read the text whole and split it.
  file(READ "${file}" text)
  string(REGEX REPLACE "\n$" "" text "${text}")
  string(REPLACE ";" "\\;" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(body "")
  foreach(line IN LISTS lines)
    if(line STREQUAL "")
      string(APPEND body " .\n")
    else()
      string(APPEND body " ${line}\n")
    endif()
  endforeach()
  set(${var} "${body}" PARENT_SCOPE)
endfunction()

function(deb_copyright out)
  set(src "${PROJECT_SOURCE_DIR}")
  deb_copyright_body("${src}/LICENSE" bsd)
  deb_copyright_body("${src}/web/vendor/uplot/LICENSE" mit)
  file(STRINGS "${src}/web/vendor/uplot/LICENSE" uplot_holder REGEX "^Copyright ")
  string(REGEX REPLACE "^Copyright (\\(c\\) )?" "" uplot_holder "${uplot_holder}")
  file(WRITE "${out}"
"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: psbench
Source: the psbench source tree (LICENSE)

Files: *
Copyright: 2026, the psbench authors
License: BSD-3-Clause

Files: web/vendor/uplot/*
Copyright: ${uplot_holder}
Comment: uPlot (the MIT License), compiled into psbench-master (its
 dashboard and a sweep's report.html): web/vendor/uplot/LICENSE.
License: Expat

License: BSD-3-Clause
${bsd}
License: Expat
${mit}")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${src}/LICENSE"
               "${src}/web/vendor/uplot/LICENSE")
endfunction()
