"""An account's data export: everything it holds, in one .zip file the user downloads."""
