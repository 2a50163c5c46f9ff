// Tells the server the browser's time zone (a cookie), so that pages show times in it when
// the user has chosen none on their account page. The server checks the name against the
// zones it knows; without JavaScript, pages show UTC and say so.
(function () {
  let zone;
  try {
    zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  } catch (error) {
    return;
  }
  if (!zone || !/^[A-Za-z0-9_+\-\/]+$/.test(zone)) return;
  const name = "berth_time_zone";
  const current = document.cookie.split("; ").find(function (c) { return c.startsWith(name + "="); });
  if (current === name + "=" + zone) return;
  document.cookie = name + "=" + zone + "; path=/; max-age=31536000; SameSite=Lax";
})();
