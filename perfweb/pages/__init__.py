"""What the apps add to the dashboard's pages, registered from their AppConfig.ready(): the run
page's panels (`panels`) and the navigation links (`nav`). Standard library only, at the
bottom of the server, so that an app registers without importing the dashboard, whose
pages read the apps."""
