package queue

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
)

// KeySize is the size, in bytes, of every key of a Keyring: AES-256.
const KeySize = 32

// encryptedField is the one field of a payload's envelope. A payload that
// is an object with this field alone is encrypted; it is the name to look
// for in the table.
const encryptedField = "skiplock_encrypted"

var (
	// ErrUnknownKey is wrapped by the error of Keyring.Decrypt (and of the
	// worker attempt) for a payload encrypted with a key the keyring does
	// not have. Add the key to the keyring and requeue the task.
	ErrUnknownKey = errors.New("skiplock: unknown encryption key")
	// ErrDecrypt is wrapped by the error of Keyring.Decrypt for a payload
	// that its key does not open: the ciphertext, its nonce or the task's
	// name was changed after it was encrypted, or the key under its ID is
	// not the key it was encrypted with.
	ErrDecrypt = errors.New("skiplock: encrypted payload does not decrypt")
)

// Keyring holds the AES-256-GCM keys that encrypt payloads at rest, by
// key ID, and names the current one, which encrypts new tasks. It is
// immutable and safe for concurrent use.
//
// Rotate by adding a key and making it current: tasks enqueued before
// keep the ID of the key that encrypted them and still decrypt, as long as
// the workers' keyring keeps that key.
type Keyring struct {
	current string
	aeads   map[string]cipher.AEAD
}

// NewKeyring returns a keyring of keys (key ID to 32-byte key) whose key
// current encrypts new tasks. It fails for an empty key ID, a key that is
// not 32 bytes, and a current ID that is not in keys. The key IDs are
// stored with each task, in clear; the keys never leave the process. keys
// is copied.
func NewKeyring(current string, keys map[string][]byte) (*Keyring, error) {
	ids := make([]string, 0, len(keys))
	for id := range keys {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	kr := &Keyring{current: current, aeads: make(map[string]cipher.AEAD, len(keys))}
	for _, id := range ids {
		if id == "" {
			return nil, errors.New("making a keyring: empty key ID")
		}
		if n := len(keys[id]); n != KeySize {
			return nil, fmt.Errorf("making a keyring: key %q is %d bytes; AES-256 needs %d", id, n, KeySize)
		}
		block, err := aes.NewCipher(bytes.Clone(keys[id]))
		if err != nil {
			return nil, fmt.Errorf("making a keyring: key %q: %w", id, err)
		}
		if kr.aeads[id], err = cipher.NewGCM(block); err != nil {
			return nil, fmt.Errorf("making a keyring: key %q: %w", id, err)
		}
	}
	if _, ok := kr.aeads[current]; !ok {
		return nil, fmt.Errorf("making a keyring: current key %q is not one of its keys (%q)", current, ids)
	}
	return kr, nil
}

// Current returns the ID of the key that encrypts new tasks.
func (kr *Keyring) Current() string { return kr.current }

// WithEncryption makes the Client encrypt the payload of every task it
// enqueues (Enqueue, EnqueueTx, EnqueueMany, EnqueueManyTx, workflows,
// typed tasks) with kr's current key, AES-256-GCM, bound to the task's
// name. Workers need the key in worker.Config.Keyring to run the tasks. A
// nil kr leaves payloads in clear, the default.
//
// The payload size limit (WithMaxPayloadSize) applies to the payload
// before encryption; the stored envelope is about a third larger.
func WithEncryption(kr *Keyring) ClientOption {
	return func(c *Client) { c.keyring = kr }
}

// envelope is the stored form of an encrypted payload:
// {"skiplock_encrypted": {"kid": ..., "nonce": ..., "data": ...}}, nonce and
// data in standard base64.
type envelope struct {
	Encrypted *sealed `json:"skiplock_encrypted"`
}

type sealed struct {
	KeyID string `json:"kid"`
	Nonce []byte `json:"nonce"`
	Data  []byte `json:"data"`
}

// Encrypt returns payload (JSON) sealed with the current key in its
// envelope, with name, the task's name, as additional data: the envelope
// decrypts only for a task of that name.
func (kr *Keyring) Encrypt(name string, payload json.RawMessage) (json.RawMessage, error) {
	aead := kr.aeads[kr.current]
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("encrypting payload: %w", err)
	}
	return json.Marshal(envelope{&sealed{KeyID: kr.current, Nonce: nonce, Data: aead.Seal(nil, nonce, payload, []byte(name))}})
}

// Decrypt returns the plaintext of an encrypted payload of a task named
// name. A payload that is not encrypted comes back as is. It fails with
// ErrUnknownKey when kr lacks the payload's key (a nil kr lacks every key)
// and with ErrDecrypt when the payload does not open. No error quotes the
// payload or a key.
func (kr *Keyring) Decrypt(name string, payload json.RawMessage) (json.RawMessage, error) {
	s, ok, err := parseEnvelope(payload)
	if !ok {
		return payload, nil
	}
	if err != nil {
		return nil, err
	}
	var aead cipher.AEAD
	if kr != nil {
		aead = kr.aeads[s.KeyID]
	}
	if aead == nil {
		return nil, fmt.Errorf("%w: payload encrypted with key %q, which this worker's keyring does not have", ErrUnknownKey, s.KeyID)
	}
	if len(s.Nonce) != aead.NonceSize() {
		return nil, fmt.Errorf("%w: payload encrypted with key %q has a %d-byte nonce, not %d", ErrDecrypt, s.KeyID, len(s.Nonce), aead.NonceSize())
	}
	plain, err := aead.Open(nil, s.Nonce, s.Data, []byte(name))
	if err != nil {
		return nil, fmt.Errorf("%w: payload encrypted with key %q fails authentication for task name %q: "+
			"it was altered, moved from another task, or the key under that ID changed", ErrDecrypt, s.KeyID, name)
	}
	return plain, nil
}

// EncryptedKeyID reports whether payload, as stored, is encrypted, and with
// which key ID: for tools that show payloads, which cannot read it. kid is
// empty for an envelope too malformed to name its key.
func EncryptedKeyID(payload []byte) (kid string, ok bool) {
	s, ok, err := parseEnvelope(payload)
	if !ok || err != nil {
		return "", ok
	}
	return s.KeyID, true
}

// parseEnvelope returns the sealed payload of an envelope; false for any
// other JSON, and an error for an envelope that is malformed. It looks
// closely at objects that mention the envelope's field only, so that plain
// payloads cost little.
func parseEnvelope(payload []byte) (*sealed, bool, error) {
	p := bytes.TrimLeft(payload, " \t\r\n")
	if len(p) == 0 || p[0] != '{' || !bytes.Contains(p, []byte(encryptedField)) {
		return nil, false, nil
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(p, &fields) != nil || len(fields) != 1 || fields[encryptedField] == nil {
		return nil, false, nil
	}
	var s sealed
	if err := json.Unmarshal(fields[encryptedField], &s); err != nil || s.KeyID == "" {
		return nil, true, fmt.Errorf("%w: the payload's envelope is malformed", ErrDecrypt)
	}
	return &s, true, nil
}
