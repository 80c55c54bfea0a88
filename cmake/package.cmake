# The Debian package: cpack -G DEB in a build folder (or
# cpack -G DEB --config BUILD/CPackConfig.cmake -B OUT) makes
# meter_VERSION-REVISION_ARCH.deb of what cmake/install.cmake installs, and
# of the Debian documents below, under /usr. tests/package_check.sh builds
# it, runs lintian on it, installs it and runs it.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME meter)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
# The package's version is the project's with a Debian revision: the
# packaging is a layer over the upstream release, so the package is not
# "native" and its changelog is changelog.Debian.gz (Debian Policy 12.7;
# lintian's no-changelog). Bump the revision for a new package of the same
# release; a new project version starts again at 1.
set(METER_DEB_REVISION 1)
set(CPACK_DEBIAN_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_DEBIAN_PACKAGE_RELEASE ${METER_DEB_REVISION})
set(METER_DEB_VERSION ${CPACK_DEBIAN_PACKAGE_VERSION}-${CPACK_DEBIAN_PACKAGE_RELEASE})
# The Maintainer field and the changelog's signature. The default is on a
# reserved domain (RFC 2606), a host lintian accepts (localhost it does not,
# bogus-mail-host); whoever distributes the package sets their own address.
set(METER_PACKAGE_CONTACT "meter maintainers <meter@example.org>" CACHE STRING
  "The Debian package's Maintainer: Name <address>")
set(CPACK_PACKAGE_CONTACT "${METER_PACKAGE_CONTACT}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "metering and billing of sandboxes' CPU and memory")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
  "meter-collector samples each sandbox's cgroup counters into PostgreSQL;\nmeter-api serves usage, invoices and a dashboard over HTTP and rolls the\nsamples up; meter-hook admits sandboxes for schedulers and OCI runtimes;\nmeter migrates the database and does the operator's chores.")
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# Under /usr whatever CMAKE_INSTALL_PREFIX is, installed with DESTDIR (the
# staging folder) so that the units written at install time
# (cmake/install_units.cmake) name /usr/bin and not the staging folder.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
# The libraries' packages from dpkg-shlibdeps (dpkg-dev, scripts/deps.sh);
# adduser for the postinst. The database may be on another machine, so
# PostgreSQL is only recommended.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "postgresql")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${CMAKE_SOURCE_DIR}/deploy/debian/postinst ${CMAKE_SOURCE_DIR}/deploy/debian/prerm
  ${CMAKE_SOURCE_DIR}/deploy/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)

# /usr/share/doc/meter/copyright: machine-readable (DEP-5), Apache-2.0 with a
# pointer to /usr/share/common-licenses (Debian Policy 12.5). The licence's
# statement, so in every install (cmake --install too).
install(FILES ${CMAKE_SOURCE_DIR}/deploy/debian/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})

# What only the package holds: component "debian", left out of a plain
# cmake --install (EXCLUDE_FROM_ALL) and added to the package by the second
# project entry below, which installs that component alone.
#
# /usr/share/doc/meter/changelog.Debian.gz: one entry for the version above,
# written from it (so the two cannot disagree) and gzipped -9n as Debian
# wants. Dated when configured, or SOURCE_DATE_EPOCH for a reproducible build.
string(TIMESTAMP METER_DEB_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
configure_file(${CMAKE_SOURCE_DIR}/deploy/debian/changelog.in
  ${CMAKE_BINARY_DIR}/debian/changelog.Debian @ONLY)
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/debian/changelog.Debian.gz
  COMMAND sh -c "gzip -9n -c \"$0\" >\"$1\"" ${CMAKE_BINARY_DIR}/debian/changelog.Debian
          ${CMAKE_BINARY_DIR}/debian/changelog.Debian.gz
  DEPENDS ${CMAKE_BINARY_DIR}/debian/changelog.Debian VERBATIM)
add_custom_target(debian_changelog ALL DEPENDS ${CMAKE_BINARY_DIR}/debian/changelog.Debian.gz)
install(FILES ${CMAKE_BINARY_DIR}/debian/changelog.Debian.gz DESTINATION ${CMAKE_INSTALL_DOCDIR}
  COMPONENT debian EXCLUDE_FROM_ALL)
# lintian (tests/package_check.sh fails on any E: line). What it says on
# purpose is overridden, each with why, in deploy/debian/lintian-overrides,
# installed where lintian reads it: the first changelog entry closes no ITP
# bug, the daemons have systemd units and no init.d scripts, "upto" is an
# SQL column. Left as they are, informational only (lintian -I):
# - binary-has-unneeded-section .comment: CPack strips with plain strip,
#   which keeps the compiler's ident (a few bytes); dh_strip is not used.
# - hardening-no-fortify-functions, of a Debug build only: fortified libc
#   calls need optimization, and Debug builds at -O0 (CMakeLists.txt).
install(FILES ${CMAKE_SOURCE_DIR}/deploy/debian/lintian-overrides
  DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides RENAME meter
  COMPONENT debian EXCLUDE_FROM_ALL)
# Everything a plain install has (ALL), then the component "debian".
set(CPACK_INSTALL_CMAKE_PROJECTS
  "${CMAKE_BINARY_DIR};meter;ALL;/" "${CMAKE_BINARY_DIR};meter;debian;/")
include(CPack)
