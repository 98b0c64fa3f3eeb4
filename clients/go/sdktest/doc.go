// Package sdktest drives the real provider SDKs (openai-go,
// anthropic-sdk-go) through the policyd client's transport against a real
// policyd and the fake provider. It is a module of its own so that the
// client's module never depends on an SDK.
package sdktest
