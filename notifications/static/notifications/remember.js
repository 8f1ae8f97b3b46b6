// A folded panel (<details data-nq-remember="name">) opens as the operator last left it:
// the choice is kept in this browser (localStorage), one per panel. No storage, no memory.
"use strict";
document.querySelectorAll("details[data-nq-remember]").forEach(function (details) {
  var key = "notifications:" + details.dataset.nqRemember;
  try {
    details.open = window.localStorage.getItem(key) === "open";
  } catch (e) {
    return;
  }
  details.addEventListener("toggle", function () {
    try {
      window.localStorage.setItem(key, details.open ? "open" : "closed");
    } catch (e) {
      // storage full or refused: the panel simply folds again next time
    }
  });
});
