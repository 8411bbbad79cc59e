"""The plugin host: the hooks (:mod:`.hookspecs`), what plugins registered (:mod:`.registry`,
its entries in :mod:`.entries`, checked by :mod:`.checks`), the parts that load on first use
(:mod:`.deferred`) and finding and loading plugins (:mod:`.plugins`). Light: no torch,
gymnasium or numpy."""
