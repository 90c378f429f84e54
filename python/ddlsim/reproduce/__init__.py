"""Paper reproductions: each module regenerates one paper's tables and figures with ddlsim."""
