import { configure } from '@testing-library/svelte/pure';

// `findBy…` and `waitFor` wait for the UI within this deadline. Testing Library's default of 1 s is
// a speed check on a loaded machine; a wrong screen still fails, only later.
configure({ asyncUtilTimeout: 15_000 });
