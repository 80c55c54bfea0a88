# The Debian package: cpack -G DEB in a build folder (or
# cpack -G DEB --config BUILD/CPackConfig.cmake -B OUT) makes
# meter_VERSION_ARCH.deb of what cmake/install.cmake installs, under /usr.
# tests/package_check.sh builds it, installs it and runs it.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME meter)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "meter maintainers <meter@localhost>")
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
include(CPack)
