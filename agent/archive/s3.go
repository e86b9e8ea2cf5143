package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
}

// S3 is an archive in an S3 bucket.
type S3 struct {
	client *minio.Client
	bucket string
	region string

	mu          sync.Mutex
	bucketReady bool
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
	return &S3{client: client, bucket: cfg.Bucket, region: cfg.Region}, nil
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
	}
	s.bucketReady = true
	return nil
}

// Check reaches the bucket, creating it if it is missing (as the first
// write would).
func (s *S3) Check(ctx context.Context) error {
	return s.ensureBucket(ctx)
}

// Put uploads one object; S3 replaces an object with the same key.
func (s *S3) Put(ctx context.Context, key string, records []*rivorav1.DeadLetter) error {
	if err := s.ensureBucket(ctx); err != nil {
		return fmt.Errorf("archive %s: %w", key, err)
	}
	data, err := Encode(records)
	if err != nil {
		return err
	}
	_, err = s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{
		ContentType: "application/gzip",
	})
	if err != nil {
		return fmt.Errorf("archive %s: %w", key, err)
	}
	return nil
}

// List returns the keys under prefix, sorted.
func (s *S3) List(ctx context.Context, prefix string) ([]string, error) {
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

// Get downloads and decodes one object.
func (s *S3) Get(ctx context.Context, key string) ([]*rivorav1.DeadLetter, error) {
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", key, err)
	}
	defer obj.Close()
	data, err := io.ReadAll(obj)
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", key, err)
	}
	out, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", key, err)
	}
	return out, nil
}

// Answered reports whether err is the store's own answer (an S3 error
// response such as AccessDenied or NoSuchBucket): the store was reached.
// Any other failure (refused, timed out, cut) says it could not be.
func Answered(err error) bool {
	var resp minio.ErrorResponse
	return errors.As(err, &resp) && resp.Code != ""
}
