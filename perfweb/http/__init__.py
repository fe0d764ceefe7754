"""The server's HTTP helpers, below every app that answers requests: request bodies in and
JSON out (`bodies`), who is calling (`auth`). No app's code: the apps import these, the API
door (`perfweb.api`) and the apps' pages use them."""
