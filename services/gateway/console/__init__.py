"""The web console's static files (index.html, console.js, console.css), served at /console."""
