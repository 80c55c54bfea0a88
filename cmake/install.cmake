# cmake --install: the programs, the migrations, the systemd units, the man
# pages and the example configuration, in the FHS places of GNUInstallDirs
# (included by CMakeLists.txt after the programs). The Debian package
# (cmake/package.cmake) is made of the same files, and its changelog and
# lintian overrides.
#
#   bin/                                meter, meter-api, meter-collector, meter-hook
#   share/meter/migrations/             NNNN_name.sql, functions/NAME.sql, history.sums and
#                                       citus/place.sql
#   lib/systemd/system/                 meter-api.service, meter-collector.service
#   share/man/man1, man8/               meter.1, meter-api.8, meter-collector.8, meter-hook.8
#   share/doc/meter/                    README.md, copyright (cmake/package.cmake)
#   share/doc/meter/examples/           meter.env.example, meter-api.env.example, pgbouncer.ini
#
# The installed programs find the migrations from their own path
# (common/paths.h): nothing installed refers to the source tree.

install(TARGETS meter meter-api meter-collector meter-hook
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Every .sql of migrations/ with its functions/ and citus/ subfolders, as found
# at install time (a new migration or function needs no change here), and the
# released checksums; migrate.c and .h are code.
install(DIRECTORY ${CMAKE_SOURCE_DIR}/migrations/
  DESTINATION ${CMAKE_INSTALL_DATADIR}/meter/migrations
  FILES_MATCHING PATTERN "*.sql" PATTERN "history.sums")

# The systemd units, in lib/systemd/system under the prefix (Debian's place:
# /usr/lib/systemd/system, the same folder as /lib/systemd/system on a
# merged-/usr Debian 12, and where systemd looks). deploy/*.service name
# /usr/local/bin, as for a hand-made install (tests/deploy_check.sh verifies
# them as they are); the copy installed names the programs under the prefix
# being installed to. That prefix is known only at install time (cpack
# installs under /usr, cmake --install --prefix anywhere), so the units are
# written then, by cmake/install_units.cmake.
install(CODE "
  set(METER_DEPLOY_DIR \"${CMAKE_SOURCE_DIR}/deploy\")
  set(METER_UNITS_STAGE \"${CMAKE_BINARY_DIR}/units\")
  set(METER_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
  set(METER_DOCDIR \"${CMAKE_INSTALL_DOCDIR}\")
  include(\"${CMAKE_SOURCE_DIR}/cmake/install_units.cmake\")")

# Man pages (docs/man), gzipped as Debian wants them.
set(meter_man_pages meter.1 meter-api.8 meter-collector.8 meter-hook.8)
set(meter_man_out)
foreach(page IN LISTS meter_man_pages)
  set(in ${CMAKE_SOURCE_DIR}/docs/man/${page})
  set(out ${CMAKE_BINARY_DIR}/man/${page}.gz)
  add_custom_command(OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
    COMMAND sh -c "gzip -9n -c \"$0\" >\"$1\"" ${in} ${out}
    DEPENDS ${in} VERBATIM)
  list(APPEND meter_man_out ${out})
  string(REGEX MATCH "[0-9]$" section ${page})
  install(FILES ${out} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
endforeach()
add_custom_target(man ALL DEPENDS ${meter_man_out})

# The example configuration goes to share/doc/meter/examples, not /etc/meter:
# the env files hold the database password (CHANGE-ME in the examples) and
# the units read /etc/meter/meter.env and meter-api.env as they are. Shipped
# in /etc, a placeholder password would start services that fail against the
# database in a loop, and the real file would be a dpkg conffile, world-
# readable as shipped and prompting on upgrades over the operator's secrets.
# The operator copies them (meter-api(8), FILES: install -D -m 600 ...).
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${CMAKE_SOURCE_DIR}/deploy/meter.env.example
  ${CMAKE_SOURCE_DIR}/deploy/meter-api.env.example ${CMAKE_SOURCE_DIR}/deploy/pgbouncer.ini
  DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
