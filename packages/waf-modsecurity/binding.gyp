{
  "targets": [
    {
      "target_name": "modsecurity",
      "sources": ["addon/addon.cc"],
      "include_dirs": [
        "<!(node -p \"require('node-addon-api').include_dir\")",
        "<!@(pkg-config --cflags-only-I modsecurity | sed 's/-I//g')"
      ],
      "libraries": ["<!@(pkg-config --libs modsecurity)"],
      # NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS and NODE_ADDON_API_CPP_EXCEPTIONS_ALL are required,
      # see "Stopping threads" in addon/addon.cc (addon.cc refuses to compile without them).
      "defines": [
        "NAPI_VERSION=9",
        "NAPI_CPP_EXCEPTIONS",
        "NODE_ADDON_API_CPP_EXCEPTIONS_ALL",
        "NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS",
        "NODE_ADDON_API_DISABLE_DEPRECATED"
      ],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-frtti", "-O2", "-Wno-unused-parameter"]
    }
  ]
}
