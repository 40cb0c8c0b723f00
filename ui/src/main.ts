import { mount } from 'svelte';
import App from './App.svelte';
import { setTransport } from './lib/app.svelte';
import { isTauri } from '@tauri-apps/api/core';
import { HttpTransport } from './lib/http';
import { adoptTokenFromAddress } from './lib/credential';
import { TauriTransport } from './lib/tauri';
import './app.css';
import 'highlight.js/styles/github.css';

// In the desktop app, Tauri's commands; in a browser, the `catena serve` that served the page
// (with the per-launch token its printed address carries, when it has an API key).
const desktop = isTauri() ? new TauriTransport() : null;
if (!desktop) adoptTokenFromAddress(window.location, window.history, window.sessionStorage);
setTransport(desktop ?? new HttpTransport());

const target = document.getElementById('app');
if (target) {
  mount(App, { target });
  desktop?.windowReady().catch(() => {
    // Only a measurement: the app works without it.
  });
}
