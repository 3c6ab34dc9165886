"""One search backend per database vendor (documents.search picks one by the default connection)."""
