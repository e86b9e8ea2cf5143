package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// S3Config configures an S3 (or MinIO) archive.
type S3Config struct {
	// Endpoint is host:port, without scheme.
	Endpoint  string
	Bucket    string
	AccessKey string
	SecretKey string
	// Insecure speaks plain HTTP instead of TLS.
	Insecure bool
	Region   string
	// Log is where the archive tells that it created its bucket (nil:
	// slog.Default()).
	Log *slog.Logger
}

// S3 is an archive in an S3 bucket.
type S3 struct {
	client *minio.Client
	bucket string
	region string
	log    *slog.Logger

	mu          sync.Mutex
	bucketReady bool
	// bucketLost is set when the bucket, ready before, was found missing:
	// its next creation is told as a re-creation.
	bucketLost bool
}

// NewS3 returns an S3 archive. The store need not be up: the bucket is
// checked (and created if missing) before the first use that reaches it.
func NewS3(cfg S3Config) (*S3, error) {
	if cfg.Endpoint == "" || cfg.Bucket == "" {
		return nil, fmt.Errorf("s3 archive: endpoint and bucket are required")
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure: !cfg.Insecure,
		Region: cfg.Region,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 archive %s: %w", cfg.Endpoint, err)
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	return &S3{client: client, bucket: cfg.Bucket, region: cfg.Region, log: log}, nil
}

// ensureBucket creates the bucket if it is missing, once.
func (s *S3) ensureBucket(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bucketReady {
		return nil
	}
	exists, err := s.client.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("s3 bucket %s: %w", s.bucket, err)
	}
	if !exists {
		if err := s.client.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{Region: s.region}); err != nil {
			return fmt.Errorf("s3 create bucket %s: %w", s.bucket, err)
		}
		if s.bucketLost {
			s.log.Warn("archive bucket was removed while in use; created it again (dead letters archived in it before are gone with it)", "bucket", s.bucket)
		} else {
			s.log.Info("archive bucket created", "bucket", s.bucket)
		}
	}
	s.bucketReady, s.bucketLost = true, false
	return nil
}

// lostBucket forgets that the bucket is ready when err says it is missing
// (removed while in use), so that the next use creates it again instead of
// failing until a restart; it reports whether it did.
func (s *S3) lostBucket(err error) bool {
	if s3Code(err) != minio.NoSuchBucket {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bucketReady {
		s.bucketReady, s.bucketLost = false, true
	}
	return true
}

// Check reaches the bucket, creating it if it is missing (as the first
// write would).
func (s *S3) Check(ctx context.Context) error {
	return s.ensureBucket(ctx)
}

// Put uploads one object, never over another (see putNew). A bucket
// removed while in use is created again, and the write tried once more.
func (s *S3) Put(ctx context.Context, key string, records []*rivorav1.DeadLetter) (string, error) {
	for try := 0; ; try++ {
		if err := s.ensureBucket(ctx); err != nil {
			return "", fmt.Errorf("archive %s: %w", key, err)
		}
		written, err := putNew(ctx, s, key, records)
		if err != nil && s.lostBucket(err) && try == 0 {
			continue
		}
		return written, err
	}
}

// create uploads an object only if its key is free: a conditional PUT
// (If-None-Match: *, answered 412 PreconditionFailed when the key is
// taken). A Stat comes first because an S3 store that does not know the
// condition may ignore it and replace the object: against such a store
// only two writers racing for one free key, between the Stat and the PUT,
// can still replace one another's object (rare: two data directories on
// one bucket writing the same partition's same ledger range in the same
// second). MinIO and AWS S3 honour the condition (a test checks MinIO).
func (s *S3) create(ctx context.Context, key string, data []byte) (bool, error) {
	switch _, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{}); {
	case err == nil:
		return false, nil
	case s3Code(err) != minio.NoSuchKey:
		return false, fmt.Errorf("archive %s: %w", key, err)
	}
	opts := minio.PutObjectOptions{ContentType: "application/gzip"}
	opts.SetMatchETagExcept("*")
	_, err := s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(data), int64(len(data)), opts)
	switch {
	case err == nil:
		return true, nil
	case s3Code(err) == minio.PreconditionFailed:
		return false, nil
	}
	return false, fmt.Errorf("archive %s: %w", key, err)
}

func (s *S3) read(ctx context.Context, key string) ([]byte, error) {
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", key, err)
	}
	defer obj.Close()
	data, err := io.ReadAll(obj)
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", key, err)
	}
	return data, nil
}

// List returns the keys under prefix, sorted. A bucket removed while in
// use is created again, and the listing tried once more (as Put does):
// NoSuchBucket is otherwise a refused access (Refused), which it is not.
func (s *S3) List(ctx context.Context, prefix string) ([]string, error) {
	for try := 0; ; try++ {
		keys, err := s.list(ctx, prefix)
		if err != nil && s.lostBucket(err) && try == 0 {
			continue
		}
		return keys, err
	}
}

func (s *S3) list(ctx context.Context, prefix string) ([]string, error) {
	if err := s.ensureBucket(ctx); err != nil {
		return nil, fmt.Errorf("list archive %s: %w", prefix, err)
	}
	var keys []string
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("list archive %s: %w", prefix, obj.Err)
		}
		keys = append(keys, obj.Key)
	}
	sort.Strings(keys)
	return keys, nil
}

// Get downloads and decodes one object. A bucket removed while in use is
// created again and the read tried once more, as in List: the object is
// then missing (NoSuchKey), not refused.
func (s *S3) Get(ctx context.Context, key string) ([]*rivorav1.DeadLetter, error) {
	var data []byte
	for try := 0; ; try++ {
		var err error
		if try > 0 {
			if err := s.ensureBucket(ctx); err != nil {
				return nil, fmt.Errorf("archive %s: %w", key, err)
			}
		}
		data, err = s.read(ctx, key)
		if err != nil && s.lostBucket(err) && try == 0 {
			continue
		}
		if err != nil {
			return nil, err
		}
		break
	}
	out, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", key, err)
	}
	return out, nil
}

// s3Code is the S3 error code of err ("NoSuchBucket", "AccessDenied", …),
// "" when err is not the store's answer.
func s3Code(err error) string {
	var resp minio.ErrorResponse
	if errors.As(err, &resp) {
		return resp.Code
	}
	return ""
}

// refusals are the S3 error codes that say the store refuses this agent
// its bucket: the credentials or the bucket are wrong, and waiting does
// not make them right.
var refusals = map[string]bool{
	"AccessDenied": true, "AllAccessDisabled": true, "AccountProblem": true,
	"InvalidAccessKeyId": true, "SignatureDoesNotMatch": true, "InvalidToken": true, "ExpiredToken": true,
	minio.NoSuchBucket: true, "InvalidBucketName": true,
}

// Refused reports whether err is the store refusing access to the archive
// (wrong credentials, no permission, a bucket that is not there and may not
// be created), with the store's error code: a misconfiguration, not an
// outage.
func Refused(err error) (code string, refused bool) {
	code = s3Code(err)
	return code, refusals[code]
}

// Answered reports whether err is the store's own answer (an S3 error
// response such as AccessDenied or NoSuchBucket): the store was reached.
// Any other failure (refused, timed out, cut) says it could not be.
func Answered(err error) bool {
	var resp minio.ErrorResponse
	return errors.As(err, &resp) && resp.Code != ""
}
