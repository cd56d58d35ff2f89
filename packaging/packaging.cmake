# The Debian package: cpack -G DEB in a build tree writes
# tfprov_<version>_amd64.deb (version from project(VERSION)), its library
# dependencies computed by dpkg-shlibdeps. scripts/build-deb.sh builds it with
# Debian's hardening flags (dpkg-buildflags) and runs lintian; the remaining
# lintian tags are explained in packaging/README.md.
include(GNUInstallDirs)

# Man page and changelog, compressed as Debian policy wants (gzip -9n: no name,
# no timestamp, so the package is reproducible).
set(TFPROV_PKG_GEN ${CMAKE_BINARY_DIR}/packaging)
file(MAKE_DIRECTORY ${TFPROV_PKG_GEN})
# The man page's command and option sections and the bash completion are
# generated from the built binary's `tfprov help` (cli/main.c's command table),
# so they cannot drift from the code (scripts/gen-docs.py).
find_program(TFPROV_PYTHON3 NAMES python3 REQUIRED)
add_custom_command(OUTPUT ${TFPROV_PKG_GEN}/tfprov.1 ${TFPROV_PKG_GEN}/tfprov.bash-completion
  COMMAND ${TFPROV_PYTHON3} ${CMAKE_SOURCE_DIR}/scripts/gen-docs.py $<TARGET_FILE:tfprov>
    ${CMAKE_SOURCE_DIR} ${TFPROV_PKG_GEN}
  DEPENDS tfprov ${CMAKE_SOURCE_DIR}/scripts/gen-docs.py
    ${CMAKE_SOURCE_DIR}/packaging/tfprov.1.in ${CMAKE_SOURCE_DIR}/packaging/tfprov.bash-completion.in)
add_custom_command(OUTPUT ${TFPROV_PKG_GEN}/tfprov.1.gz
  COMMAND gzip -9n -c ${TFPROV_PKG_GEN}/tfprov.1 > ${TFPROV_PKG_GEN}/tfprov.1.gz
  DEPENDS ${TFPROV_PKG_GEN}/tfprov.1)
add_custom_command(OUTPUT ${TFPROV_PKG_GEN}/changelog.gz
  COMMAND gzip -9n -c ${CMAKE_SOURCE_DIR}/packaging/changelog > ${TFPROV_PKG_GEN}/changelog.gz
  DEPENDS ${CMAKE_SOURCE_DIR}/packaging/changelog)
add_custom_target(tfprov_docs ALL DEPENDS ${TFPROV_PKG_GEN}/tfprov.1.gz ${TFPROV_PKG_GEN}/changelog.gz
  ${TFPROV_PKG_GEN}/tfprov.bash-completion)

install(FILES ${TFPROV_PKG_GEN}/tfprov.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${TFPROV_PKG_GEN}/tfprov.bash-completion
  DESTINATION share/bash-completion/completions RENAME tfprov)
install(FILES ${CMAKE_SOURCE_DIR}/packaging/copyright ${TFPROV_PKG_GEN}/changelog.gz
  ${CMAKE_SOURCE_DIR}/packaging/README.Debian DESTINATION share/doc/tfprov)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tfprov)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(TFPROV_MAINTAINER "tfprov maintainers <tfprov@example.org>" CACHE STRING
  "Maintainer field of the Debian package (the default is a placeholder)")
set(CPACK_PACKAGE_CONTACT "${TFPROV_MAINTAINER}")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
if(TFPROV_LAZY_LIBS)
  # dlopen()ed (engine/base/lazylibs.c), so dpkg-shlibdeps does not see them.
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3, libcurl4, libarchive13, libzip4")
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3")
endif()
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3-venv, ca-certificates")
# postrm purge: profile scripts and the cache (packaging/README.Debian says why)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${CMAKE_SOURCE_DIR}/packaging/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://localhost.localdomain/tfprov")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "provision TensorFlow GPU stacks from a lockfile")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "tfprov sets up CUDA, cuDNN, a Python environment and TensorFlow on a machine
from one YAML manifest pinning every archive and wheel by URL, size and
sha256. It checks the manifest against a compatibility knowledge base, plans,
downloads in parallel, verifies every byte, places files atomically and
records each generation in a SQLite state database, so a second run changes
nothing and a killed run is recovered by the next one.")
include(CPack)
