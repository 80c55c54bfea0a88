# Run by cmake --install (and cpack) through cmake/install.cmake: writes the
# systemd units of deploy/ with the programs' and the README's paths under
# the prefix being installed to, and installs them in lib/systemd/system.
# Needs METER_DEPLOY_DIR, METER_UNITS_STAGE, METER_BINDIR and METER_DOCDIR;
# CMAKE_INSTALL_PREFIX is the install-time prefix (DESTDIR is added by
# file(INSTALL)).
foreach(unit meter-api meter-collector)
  file(READ "${METER_DEPLOY_DIR}/${unit}.service" text)
  set(from "ExecStart=/usr/local/bin/${unit}\n")
  string(FIND "${text}" "${from}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "deploy/${unit}.service has no line ExecStart=/usr/local/bin/${unit}")
  endif()
  if(IS_ABSOLUTE "${METER_BINDIR}")
    set(bindir "${METER_BINDIR}")
  else()
    set(bindir "${CMAKE_INSTALL_PREFIX}/${METER_BINDIR}")
  endif()
  if(IS_ABSOLUTE "${METER_DOCDIR}")
    set(docdir "${METER_DOCDIR}")
  else()
    set(docdir "${CMAKE_INSTALL_PREFIX}/${METER_DOCDIR}")
  endif()
  string(REPLACE "${from}" "ExecStart=${bindir}/${unit}\n" text "${text}")
  string(REPLACE "file:///usr/local/share/doc/meter/" "file://${docdir}/" text "${text}")
  string(REPLACE "# Install: the binary in /usr/local/bin," "# Install: the binary in ${bindir},"
    text "${text}")
  file(MAKE_DIRECTORY "${METER_UNITS_STAGE}")
  file(WRITE "${METER_UNITS_STAGE}/${unit}.service" "${text}")
  file(INSTALL "${METER_UNITS_STAGE}/${unit}.service"
    DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/systemd/system"
    FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
endforeach()
