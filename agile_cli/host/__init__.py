"""The plugin host: the hooks (:mod:`.hookspecs`), what plugins registered (:mod:`.registry`)
and finding and loading them (:mod:`.plugins`). Light: no torch, gymnasium or numpy."""
